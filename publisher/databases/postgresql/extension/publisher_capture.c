/*
 * The native capture of PostgreSQL: one trigger function, in C, that logs what the PL/pgSQL
 * capture (sql/postgresql/) logs, for any table, reading its columns and key from the row's
 * descriptor at each call.
 *
 * Why: a PL/pgSQL trigger pays, per call, the interpreter and an INSERT statement's executor
 * start-up, which made the application's writes 1.4-1.6x slower (README, "What capture costs the
 * application"). This function writes the event log's rows itself (a heap insert and its index
 * entries, as COPY does) and reads no catalog table. Because it names no column, a migration of
 * the table never breaks it: an added column is logged from its first change, a renamed one
 * under its new name, a dropped one no longer.
 *
 * Trigger arguments: the event log (a qualified, quoted name), the table's name in the log, the
 * style ("field" or "row"), the name of the table's row trigger (the capture switch, as in
 * capture_on.sql), then the event log's columns: status, event_type, perpetrator, table_name,
 * table_key, column_name, old_value, new_value and transaction_id ('' when it has none).
 *
 * It is installed on a table as three triggers, like the PL/pgSQL capture: AFTER INSERT OR DELETE
 * per row, AFTER UPDATE per statement with transition tables, BEFORE TRUNCATE per statement.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_relation.h"
#include "pgtime.h"
#include "rewrite/rewriteHandler.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/float.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/varlena.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(publisher_capture);

enum
{
	ARG_EVENT_LOG, ARG_TABLE_NAME, ARG_STYLE, ARG_ROW_TRIGGER,
	ARG_COLUMNS,				/* the first of the event log's nine columns */
	N_ARGS = ARG_COLUMNS + 9
};

enum
{
	COL_STATUS, COL_EVENT_TYPE, COL_PERPETRATOR, COL_TABLE_NAME, COL_TABLE_KEY,
	COL_COLUMN_NAME, COL_OLD_VALUE, COL_NEW_VALUE, COL_TRANSACTION_ID, N_COLUMNS
};

/* An event to log: kind orders an UPDATE statement's (1 gone, 2 kept, 3 come), position a key's. */
typedef struct Event
{
	int			kind;
	char	   *key;
	int			position;
	int			event_type;
	const char *column;
	char	   *old_text;
	char	   *new_text;
} Event;

/* The statement's events, kept in `context`; what builds them works in a context reset per row. */
typedef struct Events
{
	Event	   *items;
	int			count;
	int			size;
	MemoryContext context;
} Events;

/* How a type's value becomes the text the event log keeps: what `value::text` gives. */
typedef enum TextPath
{
	TEXT_BINARY,				/* bytea: base64 without line breaks */
	TEXT_SAME,					/* binary-compatible with text */
	TEXT_FUNCTION,				/* a cast function to text */
	TEXT_OUTPUT					/* the type's output function */
} TextPath;

typedef struct TextOf
{
	Oid			type;
	TextPath	path;
	bool		integer;		/* written in a table_key as it is, never quoted */
	FmgrInfo	function;
} TextOf;

#define MAX_TYPES 128
static TextOf text_of_types[MAX_TYPES];
static int	n_text_of_types = 0;

static TextOf *
text_of(Oid type)
{
	TextOf	   *found;
	Oid			base = getBaseType(type);
	Oid			function;

	for (int i = 0; i < n_text_of_types; i++)
		if (text_of_types[i].type == type)
			return &text_of_types[i];
	if (n_text_of_types == MAX_TYPES)
		n_text_of_types = 0;	/* a table of more types than this: start the cache again */
	found = &text_of_types[n_text_of_types++];
	found->type = type;
	found->integer = (base == INT2OID || base == INT4OID || base == INT8OID);
	if (base == BYTEAOID)
		found->path = TEXT_BINARY;
	else
	{
		switch (find_coercion_pathway(TEXTOID, base, COERCION_EXPLICIT, &function))
		{
			case COERCION_PATH_RELABELTYPE:
				found->path = TEXT_SAME;
				break;
			case COERCION_PATH_FUNC:
				found->path = TEXT_FUNCTION;
				fmgr_info_cxt(function, &found->function, TopMemoryContext);
				break;
			default:
				{
					bool		varlena;

					getTypeOutputInfo(base, &function, &varlena);
					found->path = TEXT_OUTPUT;
					fmgr_info_cxt(function, &found->function, TopMemoryContext);
				}
		}
	}
	return found;
}

static char *
base64_text(Datum value)
{
	text	   *encoded = DatumGetTextPP(DirectFunctionCall2(binary_encode, value,
															 CStringGetTextDatum("base64")));
	char	   *from = VARDATA_ANY(encoded);
	int			length = VARSIZE_ANY_EXHDR(encoded);
	char	   *result = palloc(length + 1);
	char	   *to = result;

	for (int i = 0; i < length; i++)
		if (from[i] != '\n')
			*to++ = from[i];
	*to = '\0';
	return result;
}

static char *
value_text(TextOf *how, Datum value)
{
	switch (how->path)
	{
		case TEXT_BINARY:
			return base64_text(value);
		case TEXT_SAME:
			return TextDatumGetCString(value);
		case TEXT_FUNCTION:
			return TextDatumGetCString(FunctionCall1(&how->function, value));
		default:
			return OutputFunctionCall(&how->function, value);
	}
}

/* A column's text in a row; NULL for a NULL. */
static char *
column_text(HeapTuple tuple, TupleDesc desc, int attnum)
{
	bool		isnull;
	Datum		value = heap_getattr(tuple, attnum, desc, &isnull);

	return isnull ? NULL : value_text(text_of(TupleDescAttr(desc, attnum - 1)->atttypid), value);
}

/* publisher_key_value: quoted where the table_key grammar needs it. */
static void
append_key_value(StringInfo key, const char *value)
{
	if (*value != '\0' && strpbrk(value, ",;'+\"=\\<>") == NULL)
	{
		appendStringInfoString(key, value);
		return;
	}
	appendStringInfoChar(key, '"');
	for (const char *c = value; *c; c++)
	{
		if (*c == '\\' || *c == '"')
			appendStringInfoChar(key, '\\');
		appendStringInfoChar(key, *c);
	}
	appendStringInfoChar(key, '"');
}

/* The row's table_key: its primary key's columns in key order; NULL where a part is NULL. */
static char *
table_key(HeapTuple tuple, TupleDesc desc, Form_pg_index key)
{
	StringInfoData text;

	initStringInfo(&text);
	for (int i = 0; i < key->indnatts; i++)
	{
		int			attnum = key->indkey.values[i];
		Form_pg_attribute attribute = TupleDescAttr(desc, attnum - 1);
		TextOf	   *how = text_of(attribute->atttypid);
		bool		isnull;
		Datum		value = heap_getattr(tuple, attnum, desc, &isnull);
		char	   *part;

		if (isnull)
			return NULL;
		part = value_text(how, value);
		if (i > 0)
			appendStringInfoChar(&text, '+');
		appendStringInfoString(&text, NameStr(attribute->attname));
		appendStringInfoChar(&text, '=');
		if (how->integer)
			appendStringInfoString(&text, part);
		else
			append_key_value(&text, part);
	}
	return text.data;
}

static bool
is_key_column(Form_pg_index key, int attnum)
{
	for (int i = 0; i < key->indnatts; i++)
		if (key->indkey.values[i] == attnum)
			return true;
	return false;
}

static int
value_column_count(TupleDesc desc, Form_pg_index key)
{
	int			count = 0;

	for (int a = 1; a <= desc->natts; a++)
		if (!TupleDescAttr(desc, a - 1)->attisdropped && !is_key_column(key, a))
			count++;
	return count;
}

static void
add_event(Events *events, int kind, char *key, int position, int event_type, const char *column,
		  char *old_text, char *new_text)
{
	Event	   *event;
	MemoryContext was = MemoryContextSwitchTo(events->context);

	if (events->count == events->size)
	{
		events->size = events->size ? events->size * 2 : 16;
		events->items = events->items ? repalloc_huge(events->items, sizeof(Event) * events->size)
			: palloc(sizeof(Event) * events->size);
	}
	event = &events->items[events->count++];
	event->kind = kind;
	/* a row's events share its key */
	event->key = events->count > 1 && strcmp(events->items[events->count - 2].key, key) == 0
		? events->items[events->count - 2].key : pstrdup(key);
	event->position = position;
	event->event_type = event_type;
	event->column = column;
	event->old_text = old_text ? pstrdup(old_text) : NULL;
	event->new_text = new_text ? pstrdup(new_text) : NULL;
	MemoryContextSwitchTo(was);
}

/* A row come (insert_events): each non-NULL value in field style, else one row event. */
static void
come_events(Events *events, int kind, char *key, HeapTuple row, TupleDesc desc, Form_pg_index key_index,
			bool field)
{
	int			position = 0;
	const char *first = NULL;
	bool		logged = false;

	if (!field || value_column_count(desc, key_index) == 0)
	{
		add_event(events, kind, key, 1, 5, NULL, NULL, NULL);
		return;
	}
	for (int a = 1; a <= desc->natts; a++)
	{
		Form_pg_attribute attribute = TupleDescAttr(desc, a - 1);
		char	   *value;

		if (attribute->attisdropped || is_key_column(key_index, a))
			continue;
		position++;
		if (first == NULL)
			first = NameStr(attribute->attname);
		value = column_text(row, desc, a);
		if (value != NULL)
			add_event(events, kind, key, position, 1, NameStr(attribute->attname), NULL, value);
		logged |= value != NULL;
	}
	if (!logged)
		add_event(events, kind, key, position + 1, 1, first, NULL, NULL);	/* all NULL */
}

/* Whether two values' published texts differ: bytes for binary, the text byte for byte. */
static bool
changed(HeapTuple old, HeapTuple new, TupleDesc desc, int attnum, char **old_text, char **new_text)
{
	*old_text = column_text(old, desc, attnum);
	*new_text = column_text(new, desc, attnum);
	if (*old_text == NULL || *new_text == NULL)
		return (*old_text == NULL) != (*new_text == NULL);
	return strcmp(*old_text, *new_text) != 0;
}

/* A row whose key the statement kept (update_events): each changed value, or one row event. */
static void
kept_events(Events *events, char *key, HeapTuple old, HeapTuple new, TupleDesc desc, Form_pg_index key_index,
			bool field)
{
	int			position = 0;

	for (int a = 1; a <= desc->natts; a++)
	{
		Form_pg_attribute attribute = TupleDescAttr(desc, a - 1);
		char	   *old_text,
				   *new_text;

		if (attribute->attisdropped || is_key_column(key_index, a))
			continue;
		position++;
		if (!changed(old, new, desc, a, &old_text, &new_text))
			continue;
		if (!field)
		{
			add_event(events, 2, key, 1, 6, NULL, NULL, NULL);
			return;
		}
		add_event(events, 2, key, position, 2, NameStr(attribute->attname), old_text, new_text);
	}
}

/* The order the PL/pgSQL capture's ORDER BY gives: kind, table_key (the log's collation), position. */
static int
event_order(const void *a, const void *b)
{
	const Event *x = a;
	const Event *y = b;

	if (x->kind != y->kind)
		return x->kind - y->kind;
	if (x->key != y->key)
	{
		int			by_key = varstr_cmp(x->key, strlen(x->key), y->key, strlen(y->key), DEFAULT_COLLATION_OID);

		if (by_key != 0)
			return by_key;
	}
	return x->position - y->position;
}

typedef struct KeyedRow
{
	char	   *key;
	HeapTuple	row;
} KeyedRow;

typedef struct KeyedRows
{
	KeyedRow   *items;
	int			count;
	int			size;
} KeyedRows;

static void
add_keyed(KeyedRows *rows, const char *key, HeapTuple row, MemoryContext context)
{
	MemoryContext was = MemoryContextSwitchTo(context);

	if (rows->count == rows->size)
	{
		rows->size = rows->size ? rows->size * 2 : 16;
		rows->items = rows->items ? repalloc_huge(rows->items, sizeof(KeyedRow) * rows->size)
			: palloc(sizeof(KeyedRow) * rows->size);
	}
	rows->items[rows->count].key = pstrdup(key);
	rows->items[rows->count++].row = heap_copytuple(row);
	MemoryContextSwitchTo(was);
}

static int
keyed_order(const void *a, const void *b)
{
	return strcmp(((const KeyedRow *) a)->key, ((const KeyedRow *) b)->key);
}

/*
 * The next row of a transition table, read as a scan of it reads (its own read pointer). A
 * tuplestore on disk reads the row into memory the slot frees at its next row: that memory is
 * taken from `slot_context`, which lives as long as the slot; the row handed back, from the
 * current one.
 */
static HeapTuple
next_row(Tuplestorestate *rows, int reader, TupleTableSlot *slot, MemoryContext slot_context)
{
	bool		should_free;
	MemoryContext was = MemoryContextSwitchTo(slot_context);
	bool		found;

	tuplestore_select_read_pointer(rows, reader);
	found = tuplestore_gettupleslot(rows, true, false, slot);
	MemoryContextSwitchTo(was);
	return found ? ExecFetchSlotHeapTuple(slot, false, &should_free) : NULL;
}

/*
 * An UPDATE statement's events (log_update.sql): old and new rows paired by table_key. The
 * transition tables hold each updated row's old and new versions at the same place, so a row
 * whose key the statement kept is logged as it is read, with nothing kept of it but its events;
 * only rows whose key changed (a renumbering, a swap) are kept, sorted and paired by key.
 */
static void
update_events(Events *events, TriggerData *trigger, TupleDesc desc, Form_pg_index key, bool field)
{
	TupleTableSlot *old_slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	TupleTableSlot *new_slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	int			old_reader = tuplestore_alloc_read_pointer(trigger->tg_oldtable, EXEC_FLAG_REWIND);
	int			new_reader = tuplestore_alloc_read_pointer(trigger->tg_newtable, EXEC_FLAG_REWIND);
	MemoryContext per_row = AllocSetContextCreate(CurrentMemoryContext, "publisher capture row",
												  ALLOCSET_DEFAULT_SIZES);
	MemoryContext was = MemoryContextSwitchTo(per_row);
	KeyedRows	old = {0},
				new = {0};
	int			i = 0,
				j = 0;

	tuplestore_select_read_pointer(trigger->tg_oldtable, old_reader);
	tuplestore_rescan(trigger->tg_oldtable);
	tuplestore_select_read_pointer(trigger->tg_newtable, new_reader);
	tuplestore_rescan(trigger->tg_newtable);
	for (;;)
	{
		HeapTuple	old_row = next_row(trigger->tg_oldtable, old_reader, old_slot, was);
		HeapTuple	new_row = next_row(trigger->tg_newtable, new_reader, new_slot, was);
		char	   *old_key = old_row ? table_key(old_row, desc, key) : NULL;
		char	   *new_key = new_row ? table_key(new_row, desc, key) : NULL;

		if (old_row == NULL && new_row == NULL)
			break;
		if (old_key != NULL && new_key != NULL && strcmp(old_key, new_key) == 0)
			kept_events(events, new_key, old_row, new_row, desc, key, field);
		else
		{
			if (old_key != NULL)
				add_keyed(&old, old_key, old_row, events->context);
			if (new_key != NULL)
				add_keyed(&new, new_key, new_row, events->context);
		}
		MemoryContextReset(per_row);
	}
	qsort(old.items, old.count, sizeof(KeyedRow), keyed_order);
	qsort(new.items, new.count, sizeof(KeyedRow), keyed_order);
	while (i < old.count || j < new.count)
	{
		int			by_key = i == old.count ? 1 : j == new.count ? -1 : strcmp(old.items[i].key, new.items[j].key);

		if (by_key < 0)
			add_event(events, 1, old.items[i++].key, 1, 4, NULL, NULL, NULL);
		else if (by_key > 0)
		{
			come_events(events, 3, new.items[j].key, new.items[j].row, desc, key, field);
			j++;
		}
		else
		{
			kept_events(events, new.items[j].key, old.items[i].row, new.items[j].row, desc, key, field);
			i++;
			j++;
		}
		MemoryContextReset(per_row);
	}
	MemoryContextSwitchTo(was);
	MemoryContextDelete(per_row);
	ExecDropSingleTupleTableSlot(old_slot);
	ExecDropSingleTupleTableSlot(new_slot);
}

/* Every row of the table as deleted, before a TRUNCATE takes them (log_truncate). */
static void
truncate_events(Events *events, Relation table, Form_pg_index key)
{
	TupleDesc	desc = RelationGetDescr(table);
	TableScanDesc scan = table_beginscan(table, GetActiveSnapshot(), 0, NULL);
	TupleTableSlot *slot = table_slot_create(table, NULL);
	MemoryContext per_row = AllocSetContextCreate(CurrentMemoryContext, "publisher capture row",
												  ALLOCSET_DEFAULT_SIZES);
	MemoryContext was = MemoryContextSwitchTo(per_row);

	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		should_free;
		HeapTuple	row = ExecFetchSlotHeapTuple(slot, false, &should_free);
		char	   *text = table_key(row, desc, key);

		if (text != NULL)
			add_event(events, 1, text, 1, 4, NULL, NULL, NULL);
		MemoryContextReset(per_row);
	}
	MemoryContextSwitchTo(was);
	MemoryContextDelete(per_row);
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
}

/* Whether the table's capture is on: its row trigger is there and enabled (capture_on.sql). */
static bool
capture_on(Relation table, const char *row_trigger)
{
	TriggerDesc *triggers = table->trigdesc;

	for (int i = 0; triggers != NULL && i < triggers->numtriggers; i++)
		if (strcmp(triggers->triggers[i].tgname, row_trigger) == 0)
			return triggers->triggers[i].tgenabled != TRIGGER_DISABLED;
	return false;
}

/* Whether the session's settings give values the texts of the capture's (text_settings.py). */
static bool
same_text_settings(void)
{
	const char *zone = pg_get_timezone_name(session_timezone);

	return DateStyle == USE_ISO_DATES && IntervalStyle == INTSTYLE_POSTGRES && extra_float_digits == 1
		&& (strcmp(zone, "UTC") == 0 || strcmp(zone, "Etc/UTC") == 0);
}

static void
set_text_settings(void)
{
	static const char *const settings[][2] = {
		{"datestyle", "ISO, YMD"}, {"intervalstyle", "postgres"}, {"extra_float_digits", "1"}, {"timezone", "UTC"}
	};

	for (int i = 0; i < lengthof(settings); i++)
		(void) set_config_option(settings[i][0], settings[i][1], PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
								 true, 0, false);
}

/* The event log's rows, written as COPY writes them: its defaults, a heap insert, its index entries. */
static void
write_events(Events *events, char **arguments)
{
	RangeVar   *name = makeRangeVarFromNameList(stringToQualifiedNameList(arguments[ARG_EVENT_LOG]));
	Relation	log = table_open(RangeVarGetRelid(name, RowExclusiveLock, false), NoLock);
	TupleDesc	desc = RelationGetDescr(log);
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *result = makeNode(ResultRelInfo);
	TupleTableSlot *slot = ExecInitExtraTupleSlot(estate, desc, &TTSOpsVirtual);
	ExprContext *context = GetPerTupleExprContext(estate);
	ExprState **defaults = palloc0(sizeof(ExprState *) * desc->natts);
	int			column[N_COLUMNS];
	Datum		perpetrator = CStringGetTextDatum(GetUserNameFromId(GetSessionUserId(), false));
	Datum		status = DirectFunctionCall3(bpcharin, CStringGetDatum("N"), ObjectIdGetDatum(InvalidOid),
											 Int32GetDatum(-1));
	Datum		table_name = CStringGetTextDatum(arguments[ARG_TABLE_NAME]);
	char		transaction[32];
	MemoryContext per_event,
				was;

	if (log->rd_rel->relkind != RELKIND_RELATION)
		ereport(ERROR, (errmsg("publisher_capture: the event log %s is not a plain table", arguments[ARG_EVENT_LOG]),
						errhint("The native capture writes the event log's rows itself; install the PL/pgSQL "
								"capture (publisher install --no-native) for an event log of another kind.")));
	InitResultRelInfo(result, log, 1, NULL, 0);
	ExecOpenIndices(result, false);
	for (int c = 0; c < N_COLUMNS; c++)
	{
		const char *name = arguments[ARG_COLUMNS + c];

		column[c] = *name ? attnameAttNum(log, name, false) : 0;
		if (*name && column[c] == InvalidAttrNumber)
			ereport(ERROR, (errmsg("publisher_capture: the event log %s has no column \"%s\"",
								   arguments[ARG_EVENT_LOG], name),
							errhint("Run publisher install again for the event log's columns as configured.")));
	}
	for (int a = 1; a <= desc->natts; a++)
	{
		bool		ours = false;
		Node	   *fallback;

		for (int c = 0; c < N_COLUMNS; c++)
			ours |= column[c] == a;
		if (ours || TupleDescAttr(desc, a - 1)->attisdropped)
			continue;
		fallback = build_column_default(log, a);
		if (fallback != NULL)
			defaults[a - 1] = ExecPrepareExpr(expression_planner((Expr *) fallback), estate);
	}
	snprintf(transaction, sizeof transaction, UINT64_FORMAT,
			 U64FromFullTransactionId(GetTopFullTransactionId()));
	per_event = AllocSetContextCreate(CurrentMemoryContext, "publisher capture event", ALLOCSET_SMALL_SIZES);
	was = MemoryContextSwitchTo(per_event);
	for (int e = 0; e < events->count; e++)
	{
		Event	   *event = &events->items[e];
		Datum	   *values = slot->tts_values;
		bool	   *nulls = slot->tts_isnull;

		ExecClearTuple(slot);
		for (int a = 0; a < desc->natts; a++)
		{
			values[a] = (Datum) 0;
			nulls[a] = true;
			if (defaults[a] != NULL)
				values[a] = ExecEvalExpr(defaults[a], context, &nulls[a]);
		}
#define SET(c, datum) do { if (column[c] > 0) { values[column[c] - 1] = (datum); nulls[column[c] - 1] = false; } } while (0)
		SET(COL_STATUS, status);
		SET(COL_EVENT_TYPE, Int32GetDatum(event->event_type));
		SET(COL_PERPETRATOR, perpetrator);
		SET(COL_TABLE_NAME, table_name);
		SET(COL_TABLE_KEY, CStringGetTextDatum(event->key));
		if (event->column != NULL)
			SET(COL_COLUMN_NAME, CStringGetTextDatum(event->column));
		if (event->old_text != NULL)
			SET(COL_OLD_VALUE, CStringGetTextDatum(event->old_text));
		if (event->new_text != NULL)
			SET(COL_NEW_VALUE, CStringGetTextDatum(event->new_text));
		SET(COL_TRANSACTION_ID, CStringGetTextDatum(transaction));
#undef SET
		ExecStoreVirtualTuple(slot);
		table_tuple_insert(log, slot, GetCurrentCommandId(true), 0, NULL);
		ExecInsertIndexTuples(result, slot, estate, false, false, NULL, NIL);
		ExecClearTuple(slot);
		ResetExprContext(context);
		MemoryContextReset(per_event);
	}
	MemoryContextSwitchTo(was);
	ExecCloseIndices(result);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
	table_close(log, NoLock);
}

Datum
publisher_capture(PG_FUNCTION_ARGS)
{
	TriggerData *trigger = (TriggerData *) fcinfo->context;
	char	  **arguments;
	Relation	table;
	TupleDesc	desc;
	Relation	key_index;
	Events		events = {.context = CurrentMemoryContext};
	bool		field;
	int			nest_level = -1;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR, (errmsg("publisher_capture: not called as a trigger")));
	if (trigger->tg_trigger->tgnargs != N_ARGS)
		ereport(ERROR, (errmsg("publisher_capture: expected %d trigger arguments, got %d", N_ARGS,
							   trigger->tg_trigger->tgnargs)));
	arguments = trigger->tg_trigger->tgargs;
	table = trigger->tg_relation;
	desc = RelationGetDescr(table);
	field = strcmp(arguments[ARG_STYLE], "field") == 0;
	if (TRIGGER_FIRED_FOR_STATEMENT(trigger->tg_event) && !capture_on(table, arguments[ARG_ROW_TRIGGER]))
		return PointerGetDatum(NULL);
	if (!OidIsValid(RelationGetPrimaryKeyIndex(table)))
		ereport(ERROR, (errmsg("publisher_capture: table \"%s\" has no primary key", RelationGetRelationName(table))));
	key_index = index_open(RelationGetPrimaryKeyIndex(table), AccessShareLock);
	if (!same_text_settings())
	{
		nest_level = NewGUCNestLevel();
		set_text_settings();
	}
	if (TRIGGER_FIRED_BY_TRUNCATE(trigger->tg_event))
		truncate_events(&events, table, key_index->rd_index);
	else if (TRIGGER_FIRED_BY_UPDATE(trigger->tg_event))
		update_events(&events, trigger, desc, key_index->rd_index, field);
	else
	{
		HeapTuple	row = trigger->tg_trigtuple;
		char	   *key = table_key(row, desc, key_index->rd_index);

		if (key != NULL && TRIGGER_FIRED_BY_INSERT(trigger->tg_event))
			come_events(&events, 1, key, row, desc, key_index->rd_index, field);
		else if (key != NULL)
			add_event(&events, 1, key, 1, 4, NULL, NULL, NULL);
	}
	if (events.count > 1)
		qsort(events.items, events.count, sizeof(Event), event_order);
	if (events.count > 0)
		write_events(&events, arguments);
	if (nest_level >= 0)
		AtEOXact_GUC(true, nest_level);
	index_close(key_index, AccessShareLock);
	return PointerGetDatum(NULL);
}
