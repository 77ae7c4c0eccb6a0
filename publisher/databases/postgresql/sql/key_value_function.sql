-- One table_key value (docs/concepts/keys-and-values.md), quoted when empty or holding any of , ; ' + " = \ < >.
-- The value is read in the "C" collation: a nondeterministic one (case-insensitive ICU)
-- supports neither regular expressions nor replace(). $$${dollar}$$: a dollar quote's tag
-- that no name in the body holds (see trigger_function).
CREATE OR REPLACE FUNCTION ${function}(value text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$${dollar}$$
    SELECT CASE
        WHEN value COLLATE "C" = '' OR value COLLATE "C" ~ '[,;''+"=\\<>]'
        THEN '"' || replace(replace(value COLLATE "C", '\', '\\'), '"', '\"') || '"'
        ELSE value
    END
$$${dollar}$$
