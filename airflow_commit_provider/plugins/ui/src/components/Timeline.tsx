// The job commit's stages as a timeline: one bar, a segment per stage as long as it took, and the stages listed
// under it (markers and cleanup_after_success included: they run after _SUCCESS's own durations were written). Each
// stage keeps its colour whichever stages a commit ran: the colour is the stage's place in the server's list.
import { Box, Flex, HStack, Text } from "@chakra-ui/react";

import type { CommitStageName, CommitStageTime } from "../api";
import { formatSeconds } from "../format";
import { HelpButton } from "./HelpButton";

const PALETTE = ["blue", "teal", "purple", "orange", "cyan", "pink", "green", "yellow", "gray"];

export const Timeline = ({ stages, total, names }: {
  readonly stages: CommitStageTime[]; readonly total: number | null; readonly names: CommitStageName[];
}) => {
  const sum = stages.reduce((a, s) => a + s.seconds, 0) || 1;
  const help = Object.fromEntries(names.map((n) => [n.name, n.help]));
  const color = (name: string) => `${PALETTE[Math.max(0, names.findIndex((n) => n.name === name)) % PALETTE.length]}.solid`;
  return (
    <Box data-testid="timeline">
      <Flex borderRadius="sm" gap="1px" h="3" overflow="hidden" w="full">
        {stages.map((s) => (
          <Box bg={color(s.name)} key={s.name} minW="2px" title={`${s.name}: ${help[s.name] ?? ""}`}
            w={`${(100 * s.seconds) / sum}%`} />
        ))}
      </Flex>
      <HStack flexWrap="wrap" gap="4" mt="2">
        {stages.map((s) => (
          <HStack data-testid={`timeline-${s.name}`} gap="1.5" key={s.name}>
            <Box bg={color(s.name)} borderRadius="full" h="2.5" w="2.5" />
            <Text fontSize="sm">{s.name}</Text>
            <Text color="fg.muted" fontSize="sm">{formatSeconds(s.seconds)}</Text>
            {help[s.name] ? <HelpButton term={s.name} text={help[s.name]} /> : undefined}
          </HStack>
        ))}
        {total === null ? undefined : (
          <Text color="fg.muted" fontSize="sm" title="from the first stage to _SUCCESS">total {formatSeconds(total)}</Text>
        )}
      </HStack>
    </Box>
  );
};
