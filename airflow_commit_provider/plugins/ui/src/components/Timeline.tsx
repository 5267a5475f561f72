// The job commit's stages as a timeline: one bar, a segment per stage as long as it took, and the stages listed
// under it (markers and cleanup_after_success included: they run after _SUCCESS's own durations were written).
import { Box, Flex, HStack, Text } from "@chakra-ui/react";

import type { CommitStageTime } from "../api";
import { COMMIT_STAGE_HELP } from "../commitStages";
import { formatSeconds } from "../format";

const PALETTE = ["blue", "teal", "purple", "orange", "cyan", "pink", "green", "yellow"];

export const Timeline = ({ stages, total }: { readonly stages: CommitStageTime[]; readonly total: number | null }) => {
  const sum = stages.reduce((a, s) => a + s.seconds, 0) || 1;
  return (
    <Box data-testid="timeline">
      <Flex borderRadius="sm" gap="1px" h="3" overflow="hidden" w="full">
        {stages.map((s, i) => (
          <Box bg={`${PALETTE[i % PALETTE.length]}.solid`} key={s.name} minW="2px" title={`${s.name}: ${COMMIT_STAGE_HELP[s.name] ?? ""}`}
            w={`${(100 * s.seconds) / sum}%`} />
        ))}
      </Flex>
      <HStack flexWrap="wrap" gap="4" mt="2">
        {stages.map((s, i) => (
          <HStack data-testid={`timeline-${s.name}`} gap="1.5" key={s.name} title={COMMIT_STAGE_HELP[s.name]}>
            <Box bg={`${PALETTE[i % PALETTE.length]}.solid`} borderRadius="full" h="2.5" w="2.5" />
            <Text fontSize="sm">{s.name}</Text>
            <Text color="fg.muted" fontSize="sm">{formatSeconds(s.seconds)}</Text>
          </HStack>
        ))}
        {total === null ? undefined : (
          <Text color="fg.muted" fontSize="sm" title="from the first stage to _SUCCESS">total {formatSeconds(total)}</Text>
        )}
      </HStack>
    </Box>
  );
};
