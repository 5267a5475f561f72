// A term's explanation behind a small "?" button: a popover that a click, a tap, Enter or Space opens and Escape
// (or a click elsewhere) closes, so keyboard and touch users reach it too (a hover-only title is neither).
// Positioned "fixed": a table's scroll area does not clip it, and it stays inside the view's own element (no
// portal), where the view's theme variables apply.
import { IconButton, Popover, Text } from "@chakra-ui/react";

const slug = (term: string): string => term.replaceAll(/[^a-z0-9]+/gi, "-").toLowerCase();

export const HelpButton = ({ term, text }: { readonly term: string; readonly text: string }) => (
  <Popover.Root lazyMount positioning={{ placement: "bottom-start", strategy: "fixed" }} unmountOnExit>
    <Popover.Trigger asChild>
      <IconButton aria-label={`What "${term}" means`} borderRadius="full" data-testid={`help-${slug(term)}`}
        minW="5" h="5" size="2xs" variant="ghost">?</IconButton>
    </Popover.Trigger>
    <Popover.Positioner>
      <Popover.Content aria-label={`${term}: what it means`} data-testid="help-popover" maxW="xs">
        <Popover.Arrow><Popover.ArrowTip /></Popover.Arrow>
        <Popover.Body p="3">
          <Text fontSize="sm" fontWeight="normal" textTransform="none">
            <Text as="span" fontWeight="semibold">{term}</Text>: {text}
          </Text>
        </Popover.Body>
      </Popover.Content>
    </Popover.Positioner>
  </Popover.Root>
);
