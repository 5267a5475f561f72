// The tab: each write stage of the run, its summary first, then its tasks (or, opened by the "Commit target" link,
// the files it published); on a task instance's page, that task's row first.
import { Box, Button, Card, EmptyState, HStack, Separator, Spinner, Table, Text, VStack } from "@chakra-ui/react";
import { useEffect, useState } from "react";

import { getJson, type Page, runPath, type Stage, type TaskRow } from "./api";
import { FilesTable } from "./components/FilesTable";
import { Help } from "./components/Help";
import { StageFacts, StageHeader, StageSummary } from "./components/StageSummary";
import { TaskHeader, TaskRowCells, TaskTable } from "./components/TaskTable";
import { useTimeZone, zoneAbbreviation } from "./time";
import { useRunStatus } from "./useRunStatus";

export interface CommitStatusProps { dagId?: string; runId?: string; taskId?: string; mapIndex?: string }

type View = "status" | "target";

const groupOf = (taskId: string): string => (taskId.includes(".") ? taskId.slice(0, taskId.lastIndexOf(".")) : "");

/** The map index of the task instance *taskId* / *mapIndex* in *stage* (its task number, unless the stage has
 * several shards per task instance): the UI passes no map index for an unmapped task instance, whose map index is
 * 0. */
const myTask = (stage: Stage, taskId?: string, mapIndex?: string): number | undefined => {
  if (!taskId || taskId !== stage.write_task_id) return undefined;
  const n = mapIndex === undefined || mapIndex === "" ? 0 : Number(mapIndex);
  return Number.isInteger(n) && n >= 0 ? n : 0;
};

/** The task instance's own task, or its shards (each a task, with its own attempts and commit). */
const MyTask = ({ dagId, runId, stage, mapIndex, version }: {
  readonly dagId: string; readonly runId: string; readonly stage: Stage; readonly mapIndex: number;
  readonly version: string;
}) => {
  const [rows, setRows] = useState<TaskRow[] | null>();
  const shards = stage.shards_per_task;
  useEffect(() => {
    const abort = new AbortController();
    getJson<Page<TaskRow>>(`${runPath(dagId, runId)}/stages/${encodeURIComponent(stage.setup_task_id)}/tasks`,
      { limit: Math.min(shards, 500), map_index: mapIndex, version }, abort.signal)
      .then((p) => setRows(p.items.length ? p.items : null)).catch(() => setRows(null));
    return () => abort.abort();
  }, [dagId, runId, stage.setup_task_id, mapIndex, shards, version]);
  if (rows === undefined) return null;
  const first = mapIndex * shards;
  const title = shards > 1
    ? `This task instance: ${shards} shards, tasks ${first}–${first + shards - 1}`
    : `This task instance: task ${mapIndex}`;
  return (
    <Card.Root bg="transparent" data-testid="my-task" size="sm" variant="outline">
      <Card.Header><Text fontWeight="semibold">{title}</Text></Card.Header>
      <Card.Body>
        {rows === null ? <Text color="fg.muted">The storage has no record of this task yet.</Text> : (
          <>
            <Table.Root size="sm"><TaskHeader sharded={shards > 1} /><Table.Body>
              {rows.map((row) => (
                <Table.Row data-task={row.task} key={row.task}><TaskRowCells row={row} /></Table.Row>
              ))}
            </Table.Body></Table.Root>
            {rows.length === 1 ? (
              <Text color="fg.muted" data-testid="my-task-why" fontSize="sm" mt="2">{rows[0].why}</Text>
            ) : (
              <Text color="fg.muted" data-testid="my-task-why" fontSize="sm" mt="2">
                A retry of this task instance runs only its shards that did not commit.
              </Text>
            )}
          </>
        )}
      </Card.Body>
    </Card.Root>
  );
};

const initialView = (): View =>
  new URLSearchParams(globalThis.location.search).get("view") === "target" ? "target" : "status";

export const CommitStatusView = ({ dagId, runId, taskId, mapIndex }: CommitStatusProps) => {
  const { status, error, polls, notFound } = useRunStatus(dagId ?? "", runId ?? "");
  const zone = useTimeZone();
  const [view, setView] = useState<View>(initialView);

  const choose = (v: View) => {
    setView(v);
    const url = new URL(globalThis.location.href);
    if (v === "target") url.searchParams.set("view", "target"); else url.searchParams.delete("view");
    globalThis.history.replaceState(globalThis.history.state, "", url);
  };

  if (!dagId || !runId) return <Text>This view belongs to a DAG run.</Text>;
  if (notFound !== undefined) {
    return (
      <EmptyState.Root data-testid="not-found" size="sm">
        <EmptyState.Content>
          <EmptyState.Title>Not found: DAG {dagId}, run {runId}</EmptyState.Title>
          <EmptyState.Description>
            Airflow has no such DAG or DAG run ({notFound}). Check the address, or open the run from the DAG's
            list of runs.
          </EmptyState.Description>
        </EmptyState.Content>
      </EmptyState.Root>
    );
  }
  if (!status) {
    return error ? <Text color="fg.error" data-testid="load-error">Commit status: {error}</Text> : <Spinner />;
  }
  if (!status.has_stages || status.stages.length === 0) {
    return (
      <EmptyState.Root data-testid="no-stage" data-live={status.live ? "1" : "0"} size="sm">
        <EmptyState.Content>
          <EmptyState.Title>{status.has_stages ? "No write stage has started yet" : "No write stage"}</EmptyState.Title>
          <EmptyState.Description>
            {status.has_stages
              ? "This run's write stages appear here once their setup task has run."
              : "This run has no commit stage (no CommitSetupOperator): there is nothing to show."}
          </EmptyState.Description>
        </EmptyState.Content>
      </EmptyState.Root>
    );
  }
  const group = taskId ? groupOf(taskId) : undefined;
  const shown = status.stages.filter((s) => group === undefined || groupOf(s.setup_task_id) === group);
  const stages = shown.length ? shown : status.stages;
  const firstTime = stages.map((s) => s.finished ?? s.started ?? s.aborted?.at).find(Boolean);
  return (
    <VStack align="stretch" data-live={status.live ? "1" : "0"} data-testid="commit-status" data-view={view} gap="6"
      py="2">
      <HStack justify="space-between">
        <HStack gap="1">
          <Button data-testid="view-status" onClick={() => choose("status")} size="xs"
            variant={view === "status" ? "solid" : "ghost"}>Job status</Button>
          <Button data-testid="view-target" onClick={() => choose("target")} size="xs"
            variant={view === "target" ? "solid" : "ghost"}>Target and files</Button>
        </HStack>
        <Text color="fg.muted" data-testid="time-zone" fontSize="xs">
          times in {zone} ({zoneAbbreviation(firstTime, zone)}){status.live ? " · updates live" : ""}
          {error ? ` · ${error}` : ""}
        </Text>
      </HStack>
      {stages.map((stage, i) => {
        const mine = myTask(stage, taskId, mapIndex);
        return (
          <Box data-job-id={stage.job_id ?? undefined} data-stage={stage.setup_task_id} data-testid="stage"
            key={stage.setup_task_id}>
            {i > 0 ? <Separator mb="6" /> : undefined}
            <VStack align="stretch" gap="4">
              <StageHeader stage={stage} />
              {mine !== undefined && view === "status" ? (
                <MyTask dagId={dagId} mapIndex={mine} runId={runId} stage={stage} version={status.version} />
              ) : undefined}
              {view === "status" ? (
                <>
                  <StageSummary commitStages={status.commit_stages} stage={stage} zone={zone} />
                  {stage.tasks_total ? (
                    <TaskTable dagId={dagId} mine={mine} runId={runId} stage={stage} version={status.version} />
                  ) : undefined}
                  <StageFacts stage={stage} zone={zone} />
                </>
              ) : (
                <>
                  <Text data-testid="target" fontFamily="mono" wordBreak="break-all">{stage.target}</Text>
                  <FilesTable dagId={dagId} runId={runId} stage={stage} version={status.version} />
                </>
              )}
            </VStack>
          </Box>
        );
      })}
      <Help commitStages={status.commit_stages} />
      <Text color="fg.muted" data-polls={polls} data-testid="version" fontSize="xs">version {status.version}</Text>
    </VStack>
  );
};
