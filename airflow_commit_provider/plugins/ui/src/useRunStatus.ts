// The run's summary, kept current cheaply: while the run is live the page asks for the run's version every
// few seconds (a few dozen bytes) and fetches the summary again only when it changed; a finished run, or a run
// without a write stage, is never polled; nor is one the server does not know (a 404: no such DAG or run).
import { useCallback, useEffect, useRef, useState } from "react";

import { ApiError, getJson, runPath, type RunStatus, type Version } from "./api";

export const POLL_MS = 3000;

export interface RunState {
  status?: RunStatus; error?: string; polls: number;
  /** the server's reason when it knows no such DAG or run (it answered 404): nothing to poll */
  notFound?: string;
}

const notFound = (err: unknown): string | undefined =>
  err instanceof ApiError && err.status === 404 ? err.detail : undefined;

export const useRunStatus = (dagId: string, runId: string): RunState => {
  const [state, setState] = useState<RunState>({ polls: 0 });
  const version = useRef<string | undefined>(undefined);
  const path = runPath(dagId, runId);

  const load = useCallback(async (signal: AbortSignal) => {
    const status = await getJson<RunStatus>(path, {}, signal);
    version.current = status.version;
    setState((s) => ({ ...s, error: undefined, status }));
    return status;
  }, [path]);

  useEffect(() => {
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const poll = async () => {
      if (document.hidden) { timer = setTimeout(poll, POLL_MS); return; }
      try {
        const v = await getJson<Version>(`${path}/version`, {}, abort.signal);
        setState((s) => ({ ...s, polls: s.polls + 1 }));
        const status = v.version !== version.current ? await load(abort.signal) : undefined;
        if ((status ? status.live : v.live)) timer = setTimeout(poll, POLL_MS);
      } catch (err) {
        if (abort.signal.aborted) return;
        setState((s) => ({ ...s, error: String(err), notFound: notFound(err) }));
        if (!notFound(err)) timer = setTimeout(poll, POLL_MS);
      }
    };
    load(abort.signal)
      .then((status) => { if (status.live) timer = setTimeout(poll, POLL_MS); })
      .catch((err) => {
        if (!abort.signal.aborted) setState((s) => ({ ...s, error: String(err), notFound: notFound(err) }));
      });
    return () => { abort.abort(); if (timer) clearTimeout(timer); };
  }, [path, load]);

  return state;
};
