// A stage's audit (commit_stage(audit=...)): passed or failed, each check with what it observed, the tasks a
// failure blames, and the approval: waiting until when (and when the store drops the staged data, if it does), or
// who answered. Shown from the audit's first verdict on; a stage without an audit shows nothing.
import { Alert, Badge, Box, HStack, Heading, Table, Text } from "@chakra-ui/react";

import type { AuditApproval, AuditView } from "../api";
import { formatBytes, formatNumber } from "../format";
import { formatTime } from "../time";

const APPROVAL_COLORS: Record<string, string> = {
  waiting: "blue", approved: "green", rejected: "red", timed_out: "red", "not asked": "gray",
};

/** What a check observed or expected, as a person reads it: a per-column or per-task mapping as "key: value"
 * pairs, never JSON's braces and quotes. */
const show = (v: unknown): string => {
  if (v === null || v === undefined) return "—";
  if (typeof v === "string") return v;
  if (typeof v === "object" && !Array.isArray(v)) {
    return Object.entries(v as Record<string, unknown>).map(([k, x]) => `${k}: ${show(x)}`).join(", ");
  }
  return Array.isArray(v) ? v.map(show).join(", ") : String(v);
};

const Approval = ({ approval, zone }: { readonly approval: AuditApproval; readonly zone: string }) => (
  <HStack data-approval={approval.state} data-testid="audit-approval" flexWrap="wrap" gap="2">
    <Text fontWeight="semibold">Approval</Text>
    <Badge colorPalette={APPROVAL_COLORS[approval.state] ?? "gray"} variant="subtle">{approval.state.replace("_", " ")}</Badge>
    <Text color="fg.muted" fontSize="sm">
      {approval.state === "waiting"
        ? `asked in the run's Required actions; waits until ${formatTime(approval.deadline, zone)}`
          + (approval.expires ? `; the store drops the staged data after ${formatTime(approval.expires, zone)}` : "")
        : approval.by ? `by ${approval.by}${approval.at ? ` at ${formatTime(approval.at, zone)}` : ""}` : ""}
    </Text>
  </HStack>
);

export const AuditCard = ({ audit, zone }: { readonly audit: AuditView; readonly zone: string }) => (
  <Box data-audit={audit.state} data-testid="audit">
    <HStack gap="3" mb="2">
      <Heading size="sm">Audit</Heading>
      <Badge colorPalette={audit.state === "passed" ? "green" : "red"} data-testid="audit-state" variant="solid">
        {audit.state}
      </Badge>
      <Text color="fg.muted" fontSize="sm">
        {audit.ref ? `try ${audit.ref}` : ""}{audit.at ? ` at ${formatTime(audit.at, zone)}` : ""}
        {audit.rows !== null ? ` · ${formatNumber(audit.rows)} rows` : ""}
        {audit.files !== null ? ` · ${formatNumber(audit.files)} files` : ""}
        {audit.bytes !== null ? ` · ${formatBytes(audit.bytes)}` : ""}
      </Text>
    </HStack>
    {audit.state === "failed" ? (
      <Alert.Root data-testid="audit-failure" mb="2" status="error" variant="outline">
        <Alert.Indicator />
        <Alert.Description>
          Nothing was published. {audit.message}{/[.!?]$/.test(audit.message) ? "" : "."}
          {audit.blamed_tasks.length
            ? ` Blamed: task${audit.blamed_tasks.length === 1 ? "" : "s"} ${audit.blamed_tasks.join(", ")}: a clear of the run runs ${audit.blamed_tasks.length === 1 ? "it" : "them"} again, the others are recovered.`
            : ""}
        </Alert.Description>
      </Alert.Root>
    ) : undefined}
    {audit.checks.length ? (
      <Table.Root data-testid="audit-checks" mb="2" size="sm">
        <Table.Header><Table.Row>
          <Table.ColumnHeader>check</Table.ColumnHeader><Table.ColumnHeader>column</Table.ColumnHeader>
          <Table.ColumnHeader>result</Table.ColumnHeader><Table.ColumnHeader>observed</Table.ColumnHeader>
          <Table.ColumnHeader>expected</Table.ColumnHeader>
        </Table.Row></Table.Header>
        <Table.Body>
          {audit.checks.map((c, i) => (
            <Table.Row data-check={c.check} data-passed={c.passed ? "1" : "0"} key={i} title={c.message}>
              <Table.Cell>{c.check}</Table.Cell><Table.Cell>{c.column ?? ""}</Table.Cell>
              <Table.Cell>
                <Badge colorPalette={c.passed ? "green" : "red"} variant="subtle">{c.passed ? "passed" : "failed"}</Badge>
              </Table.Cell>
              <Table.Cell fontFamily="mono" wordBreak="break-all">{show(c.observed)}</Table.Cell>
              <Table.Cell fontFamily="mono" wordBreak="break-all">{show(c.expected)}</Table.Cell>
            </Table.Row>
          ))}
        </Table.Body>
      </Table.Root>
    ) : undefined}
    {audit.approval ? <Approval approval={audit.approval} zone={zone} /> : undefined}
  </Box>
);
