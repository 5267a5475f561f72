// The terms, explained once: a collapsed panel under the view (each column header's "?" button says the same).
import { Accordion, Box, DataList, Text } from "@chakra-ui/react";

import type { CommitStageName } from "../api";
import { STATUS_HELP, STATUS_ORDER, TERMS } from "../terms";

export const Help = ({ commitStages }: { readonly commitStages: CommitStageName[] }) => (
  <Accordion.Root collapsible data-testid="help" variant="plain">
    <Accordion.Item value="terms">
      <Accordion.ItemTrigger cursor="pointer">
        <Text color="fg.muted" fontSize="sm">What the terms mean</Text>
        <Accordion.ItemIndicator />
      </Accordion.ItemTrigger>
      <Accordion.ItemContent>
        <Accordion.ItemBody>
          <DataList.Root orientation="horizontal" size="sm">
            {TERMS.map(([term, text]) => (
              <DataList.Item key={term}>
                <DataList.ItemLabel minW="44">{term}</DataList.ItemLabel>
                <DataList.ItemValue>{text}</DataList.ItemValue>
              </DataList.Item>
            ))}
          </DataList.Root>
          <Box mt="4">
            <Text fontWeight="semibold" mb="1">Task status</Text>
            <DataList.Root orientation="horizontal" size="sm">
              {STATUS_ORDER.map((s) => (
                <DataList.Item key={s}>
                  <DataList.ItemLabel minW="44">{s}</DataList.ItemLabel>
                  <DataList.ItemValue>{STATUS_HELP[s]}</DataList.ItemValue>
                </DataList.Item>
              ))}
            </DataList.Root>
          </Box>
          <Box mt="4">
            <Text fontWeight="semibold" mb="1">Job commit stages</Text>
            <DataList.Root orientation="horizontal" size="sm">
              {commitStages.map(({ name, help: text }) => (
                <DataList.Item key={name}>
                  <DataList.ItemLabel minW="44">{name}</DataList.ItemLabel>
                  <DataList.ItemValue>{text}</DataList.ItemValue>
                </DataList.Item>
              ))}
            </DataList.Root>
          </Box>
        </Accordion.ItemBody>
      </Accordion.ItemContent>
    </Accordion.Item>
  </Accordion.Root>
);
