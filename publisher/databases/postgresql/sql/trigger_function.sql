-- The capture function of one table's inserted and deleted rows. ${settings_on} and
-- ${settings_off} (DateStyle, TimeZone, ... where the table's columns need them) make a logged
-- value's text what query-back reads, whatever the changing session uses; $$${dollar}$$ is
-- string.Template's spelling of $tag$, a dollar quote whose tag no name in the body holds.
CREATE OR REPLACE FUNCTION ${function}() RETURNS trigger
LANGUAGE plpgsql
AS $$${dollar}$$
DECLARE
    _old_key text;
    _new_key text;
    _publisher_settings text[];
BEGIN
${settings_on}
    IF TG_OP = 'INSERT' THEN
        _new_key := ${new_key};
${on_insert}
    ELSIF TG_OP = 'DELETE' THEN
        _old_key := ${old_key};
${on_delete}
    END IF;
${settings_off}
    RETURN NULL;
END
$$${dollar}$$
