-- One table_key value (SPEC §2), quoted when empty or holding any of , ; ' + " = \ < >.
-- $$$$ is string.Template's spelling of $$.
CREATE OR REPLACE FUNCTION ${function}(value text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$$$
    SELECT CASE
        WHEN value = '' OR value ~ '[,;''+"=\\<>]'
        THEN '"' || replace(replace(value, '\', '\\'), '"', '\"') || '"'
        ELSE value
    END
$$$$
