// A stage's tasks: filtered by status, sorted by a column, or found by number, one page at a time (the server
// filters, sorts and pages: a 1,000-task stage never loads whole); the task (or, with several shards per task
// instance, the shards) of the task instance whose page this is, highlighted.
import { Box, Button, HStack, Input, Table, Text } from "@chakra-ui/react";
import { type FormEvent, useEffect, useState } from "react";

import { getJson, type Page, runPath, type Stage, type TaskRow, type TaskSort, type TaskStatus } from "../api";
import { formatBytes, formatNumber, formatSeconds } from "../format";
import { STATUS_COLORS, STATUS_HELP, STATUS_ORDER } from "../terms";
import { HelpButton } from "./HelpButton";
import { Pager } from "./Pager";
import { StatusBadge } from "./StateBadge";

export const PAGE_SIZE = 50;

const attempts = (names: string[]) => (names.length ? names.join(", ") : "—");

interface Column { name: string; help: string; sort?: TaskSort }

const SHARD_COLUMN: Column = { name: "task instance · shard", help: "the write task instance (map index) that "
  + "runs the task, and the task's shard in it: task number = map index × shards per task instance + shard" };

const COLUMNS: Column[] = [
  { name: "task", sort: "task", help: "the task number: the write task instance's map index (0 for an unmapped "
    + "write task); with several shards per task instance, map index × shards per task instance + shard" },
  { name: "status", sort: "status", help: "the task's status, from the storage's records and Airflow's task "
    + "instance" },
  { name: "committed attempt", sort: "attempt", help: "A.T: application attempt A, Airflow try T of the attempt "
    + "whose files are the output; for a recovered task, the attempt that committed in an earlier application "
    + "attempt" },
  { name: "files", sort: "files", help: "data files of the committed attempt" },
  { name: "rows", sort: "rows", help: "rows in the committed attempt's files" },
  { name: "bytes", sort: "bytes", help: "bytes in the committed attempt's files" },
  { name: "duration", sort: "duration", help: "how long the Airflow task instance's latest try ran (every shard "
    + "of a task instance shares it)" },
  { name: "failed attempts", help: "attempts recorded failed (aborted, fenced by a newer try, removed by the "
    + "teardown)" },
  { name: "denied attempts", help: "attempts that claimed the commit and lost to another attempt" },
  { name: "unfinished attempts", help: "attempts set up with no fate yet (running, or killed and not yet fenced)" },
];

/** The table's order: a column and its direction (the server sorts; ties keep task order, blanks go last). */
export interface Order { sort: TaskSort; desc: boolean }

export const TaskRowCells = ({ row }: { readonly row: TaskRow }) => (
  <>
    <Table.Cell>{row.task}</Table.Cell>
    {row.shard === null ? undefined : (
      <Table.Cell data-testid="task-shard">[{row.map_index}] · {row.shard}</Table.Cell>
    )}
    <Table.Cell><StatusBadge status={row.status} why={row.why} /></Table.Cell>
    <Table.Cell data-testid="committed-attempt">{row.committed_attempt ?? "—"}</Table.Cell>
    <Table.Cell>{row.committed_attempt ? formatNumber(row.files) : "—"}</Table.Cell>
    <Table.Cell>{row.committed_attempt ? formatNumber(row.rows) : "—"}</Table.Cell>
    <Table.Cell>{row.committed_attempt ? formatBytes(row.bytes) : "—"}</Table.Cell>
    <Table.Cell data-testid="task-duration">{row.duration === null ? "—" : formatSeconds(row.duration)}</Table.Cell>
    <Table.Cell data-testid="failed-attempts">{attempts(row.failed_attempts)}</Table.Cell>
    <Table.Cell data-testid="denied-attempts">{attempts(row.denied_attempts)}</Table.Cell>
    <Table.Cell data-testid="unfinished-attempts">{attempts(row.unfinished_attempts)}</Table.Cell>
  </>
);

const ariaSort = (col: Column, order?: Order): "ascending" | "descending" | "none" | undefined => {
  if (!col.sort || !order) return undefined;
  if (order.sort !== col.sort) return "none";
  return order.desc ? "descending" : "ascending";
};

/** The header: every column's help behind a button; with *onSort*, the sortable columns' names are buttons that
 * sort by them (again: the other direction), and ``aria-sort`` says which column orders the table. */
export const TaskHeader = ({ sharded = false, order, onSort }: {
  readonly sharded?: boolean; readonly order?: Order; readonly onSort?: (sort: TaskSort) => void;
}) => (
  <Table.Header>
    <Table.Row>
      {(sharded ? [COLUMNS[0], SHARD_COLUMN, ...COLUMNS.slice(1)] : COLUMNS).map((col) => {
        const sorted = ariaSort(col, onSort ? order : undefined);
        const arrow = { ascending: " ↑", descending: " ↓", none: "" }[sorted ?? "none"];
        return (
          <Table.ColumnHeader aria-sort={sorted} data-column={col.name} key={col.name} whiteSpace="nowrap">
            <HStack gap="0.5">
              {col.sort && onSort ? (
                <Button data-testid={`sort-${col.sort}`} fontWeight="semibold" onClick={() => onSort(col.sort!)}
                  px="1" size="xs" variant="ghost">{col.name}{arrow}</Button>
              ) : <Text as="span">{col.name}</Text>}
              <HelpButton term={col.name} text={col.help} />
            </HStack>
          </Table.ColumnHeader>
        );
      })}
    </Table.Row>
  </Table.Header>
);

/** "Go to task": the task number typed, found by the server in the whole stage (not in the page shown). */
const FindTask = ({ found, onFind }: {
  readonly found?: number; readonly onFind: (task: number | undefined) => void;
}) => {
  const [text, setText] = useState("");
  const [wrong, setWrong] = useState<string>();
  const submit = (e: FormEvent) => {
    e.preventDefault();
    const value = text.trim();
    if (value === "") { setWrong(undefined); onFind(undefined); return; }
    const n = Number(value);
    if (!Number.isInteger(n) || n < 0) { setWrong(`"${value}" is no task number (0, 1, 2, …)`); return; }
    setWrong(undefined);
    onFind(n);
  };
  return (
    <form onSubmit={submit} role="search">
      <HStack gap="1.5">
        <Input aria-label="Go to task number" data-testid="find-task" inputMode="numeric" onChange={(e) => setText(e.target.value)}
          placeholder="task number" size="xs" value={text} w="32" />
        <Button data-testid="find-task-go" size="xs" type="submit" variant="outline">Go to task</Button>
        {found === undefined ? undefined : (
          <Button data-testid="find-task-clear" onClick={() => { setText(""); onFind(undefined); }} size="xs"
            variant="ghost">Show all</Button>
        )}
        {wrong ? <Text color="fg.error" data-testid="find-task-error" fontSize="sm">{wrong}</Text> : undefined}
      </HStack>
    </form>
  );
};

export const TaskTable = ({ dagId, runId, stage, version, mine }: {
  readonly dagId: string; readonly runId: string; readonly stage: Stage; readonly version: string;
  /** the map index of the task instance whose page this is */
  readonly mine?: number;
}) => {
  const [status, setStatus] = useState<TaskStatus | undefined>(undefined);
  const [order, setOrder] = useState<Order>({ sort: "task", desc: false });
  const [task, setTask] = useState<number>();
  const [offset, setOffset] = useState(0);
  const [page, setPage] = useState<Page<TaskRow>>();
  const [error, setError] = useState<string>();

  useEffect(() => {
    const abort = new AbortController();
    getJson<Page<TaskRow>>(`${runPath(dagId, runId)}/stages/${encodeURIComponent(stage.setup_task_id)}/tasks`,
      { limit: PAGE_SIZE, offset, status, task, sort: order.sort, desc: order.desc ? "true" : undefined, version },
      abort.signal)
      .then((p) => { setPage(p); setError(undefined); })
      .catch((err) => { if (!abort.signal.aborted) setError(String(err)); });
    return () => abort.abort();
  }, [dagId, runId, stage.setup_task_id, status, task, order, offset, version]);

  const choose = (s: TaskStatus | undefined) => { setStatus(s); setOffset(0); };
  const sortBy = (sort: TaskSort) => {
    setOrder((o) => ({ sort, desc: o.sort === sort ? !o.desc : false }));
    setOffset(0);
  };
  const find = (n: number | undefined) => { setTask(n); setStatus(undefined); setOffset(0); };
  const present = STATUS_ORDER.filter((s) => (stage.counts[s] ?? 0) > 0);

  return (
    <Box data-testid="task-table">
      <HStack flexWrap="wrap" gap="2" justify="space-between" mb="2">
        <HStack data-testid="status-filter" flexWrap="wrap" gap="1.5">
          <Button data-testid="filter-all" onClick={() => { setTask(undefined); choose(undefined); }} size="xs"
            variant={status === undefined && task === undefined ? "solid" : "outline"}>all {stage.tasks_total.toLocaleString("en-US")}</Button>
          {present.map((s) => (
            <Button colorPalette={STATUS_COLORS[s]} data-testid={`filter-${s}`} key={s}
              onClick={() => { setTask(undefined); choose(s); }}
              size="xs" title={STATUS_HELP[s]} variant={status === s ? "solid" : "outline"}>
              {s} {(stage.counts[s] ?? 0).toLocaleString("en-US")}
            </Button>
          ))}
        </HStack>
        <FindTask found={task} onFind={find} />
        {page ? <Pager limit={page.limit} offset={page.offset} onChange={setOffset} total={page.total} /> : undefined}
      </HStack>
      {error ? <Text color="fg.error">{error}</Text> : undefined}
      {task !== undefined && page?.total === 0 ? (
        <Text data-testid="find-task-none" mb="2">
          No task {task} in this stage (it has {formatNumber(stage.tasks_total)} task{stage.tasks_total === 1 ? "" : "s"}).
        </Text>
      ) : undefined}
      <Table.ScrollArea>
        <Table.Root interactive size="sm">
          <TaskHeader onSort={sortBy} order={order} sharded={stage.shards_per_task > 1} />
          <Table.Body>
            {(page?.items ?? []).map((row) => (
              <Table.Row bg={row.map_index === mine || row.task === task ? "bg.emphasized" : undefined}
                data-mine={row.map_index === mine || undefined} data-task={row.task} data-testid="task-row"
                key={row.task}>
                <TaskRowCells row={row} />
              </Table.Row>
            ))}
          </Table.Body>
        </Table.Root>
      </Table.ScrollArea>
    </Box>
  );
};
