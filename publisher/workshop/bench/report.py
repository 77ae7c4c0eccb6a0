"""The benchmark's report as text: each figure with its unit, the ratios first."""
from __future__ import annotations

from collections.abc import Callable

from publisher.workshop.bench.brokered import median_ratio
from publisher.workshop.bench.cold import ColdPoll
from publisher.workshop.bench.run import BenchReport
from publisher.workshop.bench.sampling import spread


def format_count(n: float) -> str:
    return f"{n:,.0f}"


def format_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.3f} s" if s < 10 else f"{s:,.1f} s"


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**20:,.1f} MiB"


def _by_cycle(sizes: list[int | None]) -> str:
    """Resident sizes taken after each cycle: the first, the last and the largest."""
    known = [n for n in sizes if n is not None]
    if not known:
        return "-"
    return (f"first {format_size(known[0])}, last {format_size(known[-1])}, largest {format_size(max(known))} "
            f"({len(known)} cycles)")


def format_report(report: BenchReport) -> str:
    """The report as a plain-text table, one measurement per line."""
    o, w, f, r, d, lat = report.options, report.workload, report.floor, report.reference, report.drain, report.latency
    lines: list[tuple[str, str]] = []

    def section(title: str) -> None:
        lines.append(("", ""))
        lines.append((title, ""))

    def row(name: str, value: str) -> None:
        lines.append(("  " + name, value))

    lines.append((
        f"publisher bench: {w.dialect}, {format_count(o.rows)} rows, {format_count(w.events)} events, "
        f"query_limit {format_count(o.query_limit)}, master {o.master}",
        "",
    ))
    section("workload (real triggers)")
    row("generated", f"{format_count(w.events)} events in {format_seconds(w.generate_seconds)} "
        f"({format_count(w.events / w.generate_seconds if w.generate_seconds else 0)} events/s)")
    row("tables loaded", f"{format_count(w.rows)} rows in {format_seconds(w.load_seconds)}")
    row("backlog", w.backlog.value)
    row("by event type", "  ".join(f"{t}: {format_count(n)}" for t, n in w.by_type.items()))
    row("loopback / malformed", f"{format_count(w.loopback)} / {format_count(w.plan.malformed)}")
    section(f"floor ({w.dialect} itself, on a vacuumed copy of the event log)")
    row("read every new row", f"{format_seconds(f.read_seconds)} ({format_count(f.rows)} rows"
        + (f", {format_size(f.bytes_read)})" if f.bytes_read is not None else ")"))
    row("mark them all", f"{format_seconds(f.mark_seconds)} ({format_count(f.marked)} rows, one UPDATE, committed)")
    if f.indexed_mark_seconds is not None:
        row("mark them, with the log's indexes", f"{format_seconds(f.indexed_mark_seconds)} (the same UPDATE on a copy "
            "with the event log's indexes; not part of the floor)")
    section(f"reference (one event at a time, measured on the first {format_count(r.events)} events)")
    row("events/s", format_count(r.events_per_second))
    row("documents / bytes", f"{format_count(r.documents)} / {format_size(r.bytes_written)}")
    if report.reference_extrapolated_seconds is not None:
        row("extrapolated",
            f"{format_seconds(report.reference_extrapolated_seconds)} for {format_count(w.events)} events")
    if report.cold is not None:
        _cold_section(report.cold, section, row)
    _drain_section(report, section, row)
    _broker_section(report, section, row)
    _subscriber_sections(report, section, row)
    section("memory (peak RSS)")
    row("driver (Python)", format_size(report.memory.driver))
    row("JVM", format_size(report.memory.jvm))
    row("Python worker (largest)", f"{format_size(report.memory.python_worker)} "
        f"({report.memory.python_workers_seen} seen)")
    if d.cycle_memory:
        row("driver after each drain cycle", _by_cycle([m["driver_bytes"] for m in d.cycle_memory]))
        row("JVM after each drain cycle", _by_cycle([m["jvm_bytes"] for m in d.cycle_memory]))
    section("ratios")
    row("publisher time / floor time", f"{report.floor_ratio:,.1f}x (warm drain)")
    if report.cold_ratio is not None:
        row("cold poll time / floor time", f"{report.cold_ratio:,.1f}x (the whole process)")
    if f.indexed_mark_seconds:
        indexed = f.read_seconds + f.indexed_mark_seconds
        row("the same, the log's indexes in the floor", f"{d.seconds / indexed:,.1f}x (warm drain)" + (
            f", {report.cold.seconds / indexed:,.1f}x (cold poll)" if report.cold is not None else ""))
    row("publisher speed / reference speed", f"{report.reference_speedup:,.1f}x")
    if report.broker_ratio is not None:
        row("messages to Kafka / files only", f"{report.broker_ratio:,.2f}x wall, "
            f"{_times(median_ratio(report.broker_pairs, cpu=True))} CPU (median of {len(report.broker_pairs)} "
            f"pairs of warm drains, {o.encoding})")
    section(f"small-poll latency ({len(lat.to_acknowledged)} cycles of {lat.events_per_cycle} events, warm session)")
    for name, values in (("commit -> documents on disk", lat.to_documents),
                         ("commit -> statuses written", lat.to_acknowledged)):
        spreads = spread(values)
        row(name, f"median {format_seconds(spreads['median'])}  p95 {format_seconds(spreads['p95'])}")
    cycles = max(1, len(lat.to_acknowledged))
    row("per cycle, by stage", "  ".join(
        f"{stage} {spent / cycles * 1000:.1f}" for stage, spent in lat.stage_seconds.items() if "." not in stage
    ) + " (ms)")
    lines.append(("", ""))
    lines.append(("new rows left in the event log", format_count(report.left_new)))
    width = max(len(name) for name, value in lines if value) + 2
    return "\n".join(f"{name:<{width}}{value}".rstrip() if value else name for name, value in lines)


def _cold_section(cold: ColdPoll, section: Callable[[str], None], row: Callable[[str, str], None]) -> None:
    section("cold poll (one `publisher poll` process on the whole backlog, before the warm drain)")
    row("events", f"{format_count(cold.cycle.get('events') or 0)}  (" + "  ".join(
        f"{s} {format_count(n)}" for s, n in sorted((cold.cycle.get("statuses") or {}).items())) + ")")
    row("path", "Spark jobs" if cold.cycle.get("path") == "spark" else "the driver alone")
    row("process, start to exit", format_seconds(cold.seconds))
    row("outside the stages", format_seconds(cold.before_cycle) + " (interpreter, imports, exit)")
    for stage, spent in cold.stage_seconds.items():
        if "." not in stage:
            row(f"stage {stage}", format_seconds(spent))


def _drain_section(report: BenchReport, section: Callable[[str], None], row: Callable[[str, str], None]) -> None:
    """The warm drain: its figures, and where its time went, stage by stage."""
    o, d = report.options, report.drain
    section(f"publisher (drain, {d.cycles} cycles: {d.distributed_cycles} as Spark jobs, "
            f"{d.cycles - d.distributed_cycles} in the driver alone)")
    if report.spark_seconds is not None:
        row("SparkSession start", format_seconds(report.spark_seconds))
    if o.warm_up:
        row("warm-up (tiny backlog)", format_seconds(report.warm_up_seconds))
    row("events", f"{format_count(d.events)}  ("
        + "  ".join(f"{s} {format_count(n)}" for s, n in sorted(d.statuses.items())) + ")")
    row("wall time", format_seconds(d.seconds))
    row("events/s end to end", format_count(d.events_per_second))
    row("operations / documents", f"{format_count(d.operations)} / {format_count(d.documents)}")
    row("bytes written", format_size(d.bytes_written))
    if d.change_rows or d.messages:
        row("change-table rows / messages", f"{format_count(d.change_rows)} / {format_count(d.messages)}")
    staged = 0.0
    for stage, spent in d.stage_seconds.items():
        if "." in stage:
            row(f"  {stage.split('.', 1)[1]}", format_seconds(spent) + " (summed over the tasks)")
            continue
        staged += spent
        share = f" ({spent / d.seconds:.0%})" if d.seconds else ""
        row(f"stage {stage}", format_seconds(spent) + share)
    row("outside the stages", format_seconds(max(0.0, d.seconds - staged)))


def _broker_section(report: BenchReport, section: Callable[[str], None], row: Callable[[str, str], None]) -> None:
    """The pairs of drains of the backlog, files only and also to the broker: each pair's wall and
    CPU times and ratios, then their medians."""
    pairs = report.broker_pairs
    if not pairs:
        return
    section(f"messages to Kafka ({report.options.encoding}; {len(pairs)} pairs of drains, files only and to the "
            "broker, the backlog set back to new before each, the order alternating)")
    row("messages sent", format_count(pairs[0].to_kafka.messages) + " a drain")
    for number, pair in enumerate(pairs, start=1):
        files, kafka = pair.files_only, pair.to_kafka
        row(f"pair {number}", f"wall {format_seconds(kafka.seconds)} / {format_seconds(files.seconds)} = "
            f"{_times(pair.ratio)}   CPU {format_seconds(kafka.cpu_seconds)} / {format_seconds(files.cpu_seconds)} = "
            f"{_times(pair.cpu_ratio)}   stage changes {format_seconds(kafka.stage_seconds.get('changes', 0.0))} / "
            f"{format_seconds(files.stage_seconds.get('changes', 0.0))}")
    row("median", f"wall {_times(median_ratio(pairs))}   CPU {_times(median_ratio(pairs, cpu=True))}")


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:,.2f}x"


def _subscriber_sections(report: BenchReport, section: Callable[[str], None], row: Callable[[str, str], None]) -> None:
    """Each subscriber's check-out of the backlog, against the status mode's drain and the floor."""
    f, d = report.floor, report.drain
    for number, sub in enumerate(report.subscribers, start=1):
        section(f"subscriber bench-{number} (one check-out of the backlog in {sub.cycles} windows, before the drain)")
        row("events", f"{format_count(sub.events)}  (" + "  ".join(
            f"{s} {format_count(n)}" for s, n in sorted(sub.statuses.items())) + ", none written)")
        row("wall time", format_seconds(sub.seconds))
        row("events/s end to end", format_count(sub.events_per_second))
        row("time / status mode's time", f"{sub.seconds / d.seconds:,.2f}x" if d.seconds else "-")
        row("time / floor time", f"{sub.seconds / f.seconds:,.1f}x" if f.seconds else "-")
        row("stages", "  ".join(f"{stage} {format_seconds(spent)}" for stage, spent in sub.stage_seconds.items()
                                if "." not in stage))
