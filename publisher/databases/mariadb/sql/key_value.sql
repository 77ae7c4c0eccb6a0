-- One table_key value (docs/concepts/keys-and-values.md), the text ${value}, quoted when empty or holding any of
-- , ; ' + " = \ < >. Written inline rather than as a stored function, which would need
-- DETERMINISTIC and, with binary logging on, log_bin_trust_function_creators or SUPER. A
-- backslash is CHAR(92): a literal one would mean another text under NO_BACKSLASH_ESCAPES.
CASE
    WHEN CHAR_LENGTH(${value}) = 0
        OR ${value} REGEXP CONCAT('[,;''+"=<>', CHAR(92 USING utf8mb4), CHAR(92 USING utf8mb4), ']')
    THEN CONCAT('"', REPLACE(REPLACE(${value}, CHAR(92 USING utf8mb4), CONCAT(CHAR(92 USING utf8mb4), CHAR(92 USING utf8mb4))), '"', CONCAT(CHAR(92 USING utf8mb4), '"')), '"')
    ELSE ${value}
END
