// A stage's summary, first on the page: state, what to do next, counts per status, progress while it writes,
// totals, and the job commit's stages.
import { Alert, Badge, Box, Code, DataList, HStack, Heading, Progress, Stat, Text } from "@chakra-ui/react";
import { Fragment } from "react";

import type { CommitStageName, Stage } from "../api";
import { formatBytes, formatNumber } from "../format";
import { STATUS_COLORS, STATUS_HELP, STATUS_ORDER, TERMS } from "../terms";
import { formatTime } from "../time";
import { AuditCard } from "./AuditCard";
import { HelpButton } from "./HelpButton";
import { StageBadge } from "./StateBadge";
import { Timeline } from "./Timeline";

const TERM_HELP = Object.fromEntries(TERMS);

const numbers = (ns: number[]): string => {
  if (ns.length > 12) return `${ns.length} tasks`;
  if (ns.length === 1) return `task ${ns[0]}`;
  return `tasks ${ns.slice(0, -1).join(", ")} and ${ns[ns.length - 1]}`;
};

/** A command's words, an option (``--purge``) never broken at its hyphens: browsers break lines after a hyphen,
 * which showed ``--`` at a line's end and ``purge`` on the next. Long paths may still wrap anywhere. */
const CommandWords = ({ command }: { readonly command: string }) => (
  <span>{/* one item of the Code box (a flex box): the words flow and wrap as text inside it */}
    {command.split(" ").map((word, i) => (
      <Fragment key={i}>
        {i ? " " : ""}
        {word.startsWith("-") ? <span style={{ whiteSpace: "nowrap" }}>{word}</span> : word}
      </Fragment>
    ))}
  </span>
);

/** A sentence of advice with its `commands` set as code: selectable whole, without the backticks around them. */
const Step = ({ text }: { readonly text: string }) => (
  <Alert.Description>
    {text.split("`").map((part, i) => (i % 2
      ? (
        <Code data-testid="command" key={i} overflowWrap="anywhere" size="sm" whiteSpace="pre-wrap">
          <CommandWords command={part} />
        </Code>
      )
      : part))}
  </Alert.Description>
);

export const StageHeader = ({ stage }: { readonly stage: Stage }) => (
  <HStack gap="3">
    <Heading size="md">{stage.stage}</Heading>
    <StageBadge state={stage.state} />
  </HStack>
);

/** Where and how the stage writes: after the task table, in a compact grid. */
export const StageFacts = ({ stage, zone }: { readonly stage: Stage; readonly zone: string }) => {
  const facts: [string, string | number | null, string?][] = [
    ["target", stage.target],
    ["job id", stage.job_id],
    ["generation", stage.generation, TERM_HELP.generation],
    ["application attempt", stage.app_attempt, TERM_HELP["application attempt"]],
    ["committer", stage.committer],
    ["algorithm", stage.algorithm, TERM_HELP.algorithm],
    ["mode", stage.mode],
    ["table", stage.table],
    ["committed at", stage.state === "committed" ? formatTime(stage.finished, zone) : null],
  ];
  return (
    <DataList.Root data-testid="facts" display="grid" gap="3" gridTemplateColumns="repeat(4, minmax(0, 1fr))"
      orientation="vertical" size="sm">
      {facts.filter(([, v]) => v !== null && v !== undefined && v !== "").map(([label, value, help]) => (
        <DataList.Item gridColumn={label === "target" || label === "table" ? "span 2" : undefined} key={label}>
          <DataList.ItemLabel>{label}{help ? <HelpButton term={label} text={help} /> : undefined}</DataList.ItemLabel>
          <DataList.ItemValue data-field={label.replaceAll(" ", "_")} wordBreak="break-all">{value}</DataList.ItemValue>
        </DataList.Item>
      ))}
    </DataList.Root>
  );
};

export const StageSummary = ({ stage, zone, commitStages }: {
  readonly stage: Stage; readonly zone: string; readonly commitStages: CommitStageName[];
}) => {
  const live = stage.state === "running" || stage.state === "committing";
  const pct = stage.tasks_total ? Math.round((100 * stage.tasks_done) / stage.tasks_total) : 0;
  return (
    <Box display="flex" flexDirection="column" gap="4">
      {stage.next_steps.length ? (
        <Alert.Root data-testid="next-steps" status={["failed", "refused", "purged"].includes(stage.state) ? "warning" : "info"}
          variant="subtle">
          <Alert.Indicator />
          <Alert.Content>
            <Alert.Title>What to do</Alert.Title>
            {stage.next_steps.map((s) => <Step key={s} text={s} />)}
          </Alert.Content>
        </Alert.Root>
      ) : undefined}
      {stage.error ? <Text color="fg.error">{stage.error}</Text> : undefined}
      {stage.commit_failure && stage.state !== "committed" ? (
        <Alert.Root data-testid="commit-failure" status="error" variant="outline">
          <Alert.Indicator />
          <Alert.Description>
            The last job commit failed{stage.commit_failure.at ? ` at ${formatTime(stage.commit_failure.at, zone)}` : ""}
            {" "}in its {stage.commit_failure.stage} stage: {stage.commit_failure.error}: {stage.commit_failure.message}.
            {stage.action === "new_job"
              ? " Nothing of it is visible; every try fails the same way (see What to do)."
              : " Nothing it had not finished is visible; the next commit resumes or starts it again."}
          </Alert.Description>
        </Alert.Root>
      ) : undefined}
      {stage.aborted ? (
        <Alert.Root data-testid="abort" status="warning" variant="outline">
          <Alert.Indicator />
          <Alert.Description>
            The failed run's teardown ran at {formatTime(stage.aborted.at, zone)}: {stage.aborted.kept_tasks.length
              ? `kept ${numbers(stage.aborted.kept_tasks)} (committed, hidden under _temporary, for recovery)`
              : "kept no task"}
            {stage.aborted.visible_files_removed
              ? `; removed ${stage.aborted.visible_files_removed} visible file${stage.aborted.visible_files_removed === 1 ? "" : "s"} (v2 tasks were visible: a v2 job cannot keep them)`
              : ""}. Uncommitted attempts were recorded failed and their files removed.
          </Alert.Description>
        </Alert.Root>
      ) : undefined}
      {stage.partial_output_visible ? (
        <Alert.Root data-testid="v2-warning" status="warning" variant="subtle">
          <Alert.Indicator />
          <Alert.Description>
            Algorithm v2: each task's files became visible at its task commit; readers during the job could see
            partial output.
          </Alert.Description>
        </Alert.Root>
      ) : undefined}
      {stage.tasks_total ? (
        <Box>
          <HStack data-testid="counts" flexWrap="wrap" gap="2">
            {STATUS_ORDER.filter((s) => stage.counts[s]).map((s) => (
              <Badge colorPalette={STATUS_COLORS[s]} data-testid={`count-${s}`} key={s} size="md" title={STATUS_HELP[s]}
                variant="subtle">{s} {formatNumber(stage.counts[s])}</Badge>
            ))}
            {stage.shards_per_task > 1 ? (
              <Text color="fg.muted" data-testid="shards" fontSize="sm"
                title="each write task instance runs this many tasks (shards), each with its own attempts and commit">
                {formatNumber(stage.shards_per_task)} shards per task instance
              </Text>
            ) : undefined}
          </HStack>
          {live ? (
            <Progress.Root colorPalette="blue" data-testid="progress" maxW="xl" mt="3" size="sm" value={pct}>
              <HStack gap="3">
                <Progress.Track flex="1"><Progress.Range /></Progress.Track>
                <Progress.ValueText>{formatNumber(stage.tasks_done)} of {formatNumber(stage.tasks_total)} task(s) committed
                  {stage.state === "committing" ? "; publishing" : ""}</Progress.ValueText>
              </HStack>
            </Progress.Root>
          ) : undefined}
        </Box>
      ) : undefined}
      {stage.totals ? (
        <HStack gap="10">
          {(["rows", "files", "bytes", "tasks"] as const).map((k) => (
            <Stat.Root key={k} maxW="40">
              <Stat.Label>{k}</Stat.Label>
              <Stat.ValueText data-testid={`total-${k}`}>
                {k === "bytes" ? formatBytes(stage.totals?.bytes) : formatNumber(stage.totals?.[k])}
              </Stat.ValueText>
            </Stat.Root>
          ))}
        </HStack>
      ) : undefined}
      {stage.audit ? <AuditCard audit={stage.audit} zone={zone} /> : undefined}
      {stage.timeline.length ? (
        <Box>
          <Heading mb="2" size="sm">Job commit stages</Heading>
          <Timeline names={commitStages} stages={stage.timeline} total={stage.total_seconds} />
        </Box>
      ) : undefined}
    </Box>
  );
};
