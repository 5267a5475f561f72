import { Button, HStack, Text } from "@chakra-ui/react";

export const Pager = ({ offset, limit, total, onChange }: {
  readonly offset: number; readonly limit: number; readonly total: number; readonly onChange: (o: number) => void;
}) => (
  <HStack data-testid="pager" gap="2" justify="flex-end">
    <Text color="fg.muted" data-testid="pager-range" fontSize="sm">
      {total === 0 ? "0" : `${offset + 1}–${Math.min(offset + limit, total)}`} of {total.toLocaleString("en-US")}
    </Text>
    <Button data-testid="page-prev" disabled={offset === 0} onClick={() => onChange(Math.max(0, offset - limit))}
      size="xs" variant="outline">Previous</Button>
    <Button data-testid="page-next" disabled={offset + limit >= total} onClick={() => onChange(offset + limit)}
      size="xs" variant="outline">Next</Button>
  </HStack>
);
