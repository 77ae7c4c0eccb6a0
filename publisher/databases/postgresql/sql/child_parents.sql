-- The parent keys of a child table's rows an UPDATE statement removed (${old_only}) or added
-- (${new_only}), each once: a query-back re-reads an object's whole attribute, so one per
-- object is enough. A relation for log_rows, its keys as _k.k, byte for byte distinct.
(SELECT (${old_key}) COLLATE "C" FROM ${old_rows} AS _o WHERE ${old_only}
 UNION
 SELECT (${new_key}) COLLATE "C" FROM ${new_rows} AS _n WHERE ${new_only}) AS _k(k)
