// The read model the plugin's FastAPI app serves (plugins/read_model.py), and how to fetch it.

export type StageState = "purged" | "refused" | "running" | "committing" | "committed" | "failed" | "unreadable";
export type TaskStatus =
  | "committed" | "recovered" | "kept" | "withdrawn" | "committing" | "running" | "retrying" | "failed" | "unfinished"
  | "waiting" | "refused";

export interface CommitStageTime { name: string; seconds: number }
/** A job commit stage and what it does: the server's list (the protocol's one home for the names), in run order. */
export interface CommitStageName { name: string; help: string }
export interface Totals { files: number; bytes: number; rows: number | null; tasks: number; partitions: number | null }
export interface CommitFailure { at: string | null; stage: string | null; error: string | null; message: string | null }
export interface Abort { at: string | null; kept_tasks: number[]; visible_files_removed: number }
/** A stage's audit (plugins/audit_view.py). */
export interface AuditCheck { check: string; passed: boolean; observed: unknown; expected: unknown; column: string | null;
  message: string }
export interface AuditApproval { state: string; deadline: string | null; expires: string | null; by: string | null;
  at: string | null }
export interface AuditView {
  state: "passed" | "failed"; ref: string | null; at: string | null; message: string; blamed_tasks: number[];
  checks: AuditCheck[]; rows: number | null; files: number | null; bytes: number | null; approval: AuditApproval | null;
}

export interface Stage {
  stage: string;
  setup_task_id: string;
  write_task_id: string | null;
  job_id: string | null;
  state: StageState;
  error: string | null;
  job_uuid: string | null;
  generation: number | null;
  app_attempt: number | null;
  committer: string | null;
  algorithm: string | null;
  mode: string | null;
  target: string | null;
  started: string | null;
  finished: string | null;
  tasks_total: number;
  tasks_done: number;
  counts: Partial<Record<TaskStatus, number>>;
  totals: Totals | null;
  timeline: CommitStageTime[];
  total_seconds: number | null;
  aborted: Abort | null;
  commit_failure: CommitFailure | null;
  /** the one action that gets the stage out of its state (plugins/advice.py), and how, in sentences */
  action: "none" | "wait" | "clear_failed_tasks" | "clear_run" | "clear_commit_task" | "new_job" | "fix_setup"
    | "check_storage";
  next_steps: string[];
  partial_output_visible: boolean;
  files_total: number;
  shards_per_task: number;
  table: string | null;
  audit: AuditView | null;
}

export interface RunStatus {
  dag_id: string;
  run_id: string;
  version: string;
  run_state: string | null;
  has_stages: boolean;
  live: boolean;
  stages: Stage[];
  commit_stages: CommitStageName[];
}

export interface Version { version: string; live: boolean }

export interface TaskRow {
  task: number;
  map_index: number;
  shard: number | null;
  status: TaskStatus;
  why: string;
  airflow_state: string | null;
  try_number: number | null;
  committed_attempt: string | null;
  recovered_from_app: number | null;
  files: number;
  rows: number | null;
  bytes: number;
  failed_attempts: string[];
  denied_attempts: string[];
  unfinished_attempts: string[];
  duration: number | null;
  committing_attempts: string[];
}

/** The orders the server sorts a stage's tasks by (plugins/task_order.py). */
export type TaskSort = "task" | "status" | "attempt" | "files" | "rows" | "bytes" | "duration";

export interface Page<T> { version: string; setup_task_id: string; total: number; offset: number; limit: number; items: T[] }
export interface FileRow { path: string; size: number; rows: number | null; task: number | null }

/** The plugin's API under Airflow's base URL (the page's <base href>, so a proxy path works too). */
const apiRoot = (): string => {
  const base = document.querySelector("head > base")?.getAttribute("href") ?? "/";
  return new URL("commit-status/api/", new URL(base, globalThis.location.origin)).href;
};

export const runPath = (dagId: string, runId: string): string =>
  `dags/${encodeURIComponent(dagId)}/runs/${encodeURIComponent(runId)}`;

/** A refused request: its HTTP status (404: no such run or DAG) and the server's reason. */
export class ApiError extends Error {
  constructor(readonly status: number, readonly detail: string) {
    super(`${status} ${detail}`);
  }
}

export const getJson = async <T,>(path: string, params: Record<string, string | number | undefined> = {},
  signal?: AbortSignal): Promise<T> => {
  const url = new URL(path, apiRoot());
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined) url.searchParams.set(key, String(value));
  }
  const resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" }, signal });
  if (!resp.ok) {
    let detail = resp.statusText;
    try {
      const body = (await resp.json()).detail ?? detail;
      detail = typeof body === "string" ? body : JSON.stringify(body);
    } catch { /* not JSON */ }
    throw new ApiError(resp.status, detail);
  }
  return (await resp.json()) as T;
};
