// A stage's tasks: filtered by status, one page at a time (a 1,000-task stage never loads whole); the task (or,
// with several shards per task instance, the shards) of the task instance whose page this is, highlighted.
import { Box, Button, HStack, Table, Text } from "@chakra-ui/react";
import { useEffect, useState } from "react";

import { getJson, type Page, runPath, type Stage, type TaskRow, type TaskStatus } from "../api";
import { formatBytes, formatNumber } from "../format";
import { STATUS_COLORS, STATUS_HELP, STATUS_ORDER } from "../terms";
import { Pager } from "./Pager";
import { StatusBadge } from "./StateBadge";

export const PAGE_SIZE = 50;

const attempts = (names: string[]) => (names.length ? names.join(", ") : "—");

const SHARD_COLUMN: [string, string] = ["task instance · shard", "the write task instance (map index) that runs "
  + "the task, and the task's shard in it: task number = map index × shards per task instance + shard"];

const COLUMNS: [string, string][] = [
  ["task", "the task number: the write task instance's map index (0 for an unmapped write task); with several "
    + "shards per task instance, map index × shards per task instance + shard"],
  ["status", "the task's status, from the storage's records and Airflow's task instance"],
  ["committed attempt", "A.T: application attempt A, Airflow try T of the attempt whose files are the output; for a "
    + "recovered task, the attempt that committed in an earlier application attempt"],
  ["files", "data files of the committed attempt"],
  ["rows", "rows in the committed attempt's files"],
  ["bytes", "bytes in the committed attempt's files"],
  ["failed attempts", "attempts recorded failed (aborted, fenced by a newer try, removed by the teardown)"],
  ["denied attempts", "attempts that claimed the commit and lost to another attempt"],
  ["unfinished attempts", "attempts set up with no fate yet (running, or killed and not yet fenced)"],
];

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
    <Table.Cell data-testid="failed-attempts">{attempts(row.failed_attempts)}</Table.Cell>
    <Table.Cell data-testid="denied-attempts">{attempts(row.denied_attempts)}</Table.Cell>
    <Table.Cell data-testid="unfinished-attempts">{attempts(row.unfinished_attempts)}</Table.Cell>
  </>
);

export const TaskHeader = ({ sharded = false }: { readonly sharded?: boolean }) => (
  <Table.Header>
    <Table.Row>
      {(sharded ? [COLUMNS[0], SHARD_COLUMN, ...COLUMNS.slice(1)] : COLUMNS).map(([name, help]) => (
        <Table.ColumnHeader key={name} title={help}>{name}</Table.ColumnHeader>
      ))}
    </Table.Row>
  </Table.Header>
);

export const TaskTable = ({ dagId, runId, stage, version, mine }: {
  readonly dagId: string; readonly runId: string; readonly stage: Stage; readonly version: string;
  /** the map index of the task instance whose page this is */
  readonly mine?: number;
}) => {
  const [status, setStatus] = useState<TaskStatus | undefined>(undefined);
  const [offset, setOffset] = useState(0);
  const [page, setPage] = useState<Page<TaskRow>>();
  const [error, setError] = useState<string>();

  useEffect(() => {
    const abort = new AbortController();
    getJson<Page<TaskRow>>(`${runPath(dagId, runId)}/stages/${encodeURIComponent(stage.setup_task_id)}/tasks`,
      { limit: PAGE_SIZE, offset, status, version }, abort.signal)
      .then((p) => { setPage(p); setError(undefined); })
      .catch((err) => { if (!abort.signal.aborted) setError(String(err)); });
    return () => abort.abort();
  }, [dagId, runId, stage.setup_task_id, status, offset, version]);

  const choose = (s: TaskStatus | undefined) => { setStatus(s); setOffset(0); };
  const present = STATUS_ORDER.filter((s) => (stage.counts[s] ?? 0) > 0);

  return (
    <Box data-testid="task-table">
      <HStack flexWrap="wrap" gap="2" justify="space-between" mb="2">
        <HStack data-testid="status-filter" flexWrap="wrap" gap="1.5">
          <Button data-testid="filter-all" onClick={() => choose(undefined)} size="xs"
            variant={status === undefined ? "solid" : "outline"}>all {stage.tasks_total.toLocaleString("en-US")}</Button>
          {present.map((s) => (
            <Button colorPalette={STATUS_COLORS[s]} data-testid={`filter-${s}`} key={s} onClick={() => choose(s)}
              size="xs" title={STATUS_HELP[s]} variant={status === s ? "solid" : "outline"}>
              {s} {(stage.counts[s] ?? 0).toLocaleString("en-US")}
            </Button>
          ))}
        </HStack>
        {page ? <Pager limit={page.limit} offset={page.offset} onChange={setOffset} total={page.total} /> : undefined}
      </HStack>
      {error ? <Text color="fg.error">{error}</Text> : undefined}
      <Table.ScrollArea>
        <Table.Root interactive size="sm">
          <TaskHeader sharded={stage.shards_per_task > 1} />
          <Table.Body>
            {(page?.items ?? []).map((row) => (
              <Table.Row bg={row.map_index === mine ? "bg.emphasized" : undefined}
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
