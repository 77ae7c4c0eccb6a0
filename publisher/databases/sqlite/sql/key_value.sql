-- One table_key value (docs/concepts/keys-and-values.md), quoted when empty or holding any of , ; ' + " = \ < >.
CASE
    WHEN CAST(${value} AS TEXT) = '' OR CAST(${value} AS TEXT) GLOB '*[,;''+"=\<>]*'
    THEN '"' || replace(replace(CAST(${value} AS TEXT), '\', '\\'), '"', '\"') || '"'
    ELSE CAST(${value} AS TEXT)
END
