// The files a committed stage published: what the "Commit target" link shows for targets without a web console.
import { Box, Table, Text } from "@chakra-ui/react";
import { useEffect, useState } from "react";

import { type FileRow, getJson, type Page, runPath, type Stage } from "../api";
import { formatBytes, formatNumber } from "../format";
import { Pager } from "./Pager";

const PAGE_SIZE = 50;

export const FilesTable = ({ dagId, runId, stage, version }: {
  readonly dagId: string; readonly runId: string; readonly stage: Stage; readonly version: string;
}) => {
  const [offset, setOffset] = useState(0);
  const [page, setPage] = useState<Page<FileRow>>();
  const [error, setError] = useState<string>();

  useEffect(() => {
    const abort = new AbortController();
    getJson<Page<FileRow>>(`${runPath(dagId, runId)}/stages/${encodeURIComponent(stage.setup_task_id)}/files`,
      { limit: PAGE_SIZE, offset, version }, abort.signal)
      .then((p) => { setPage(p); setError(undefined); })
      .catch((err) => { if (!abort.signal.aborted) setError(String(err)); });
    return () => abort.abort();
  }, [dagId, runId, stage.setup_task_id, offset, version]);

  if (stage.files_total === 0) {
    return (
      <Text color="fg.muted" data-testid="no-files">
        {stage.state === "committed" ? "The commit published no file." : "Nothing is published yet: files become "
          + (stage.algorithm === "2" ? "visible at each task commit (v2)." : "visible at the job commit.")}
      </Text>
    );
  }
  return (
    <Box data-testid="files-table">
      {page ? <Pager limit={page.limit} offset={page.offset} onChange={setOffset} total={page.total} /> : undefined}
      {error ? <Text color="fg.error">{error}</Text> : undefined}
      <Table.ScrollArea>
        <Table.Root size="sm">
          <Table.Header>
            <Table.Row>
              <Table.ColumnHeader>file (under the target)</Table.ColumnHeader>
              <Table.ColumnHeader>task</Table.ColumnHeader>
              <Table.ColumnHeader>rows</Table.ColumnHeader>
              <Table.ColumnHeader>size</Table.ColumnHeader>
            </Table.Row>
          </Table.Header>
          <Table.Body>
            {(page?.items ?? []).map((f) => (
              <Table.Row data-testid="file-row" key={f.path}>
                <Table.Cell fontFamily="mono" fontSize="xs">{f.path}</Table.Cell>
                <Table.Cell>{f.task ?? "—"}</Table.Cell>
                <Table.Cell>{formatNumber(f.rows)}</Table.Cell>
                <Table.Cell>{formatBytes(f.size)}</Table.Cell>
              </Table.Row>
            ))}
          </Table.Body>
        </Table.Root>
      </Table.ScrollArea>
    </Box>
  );
};
