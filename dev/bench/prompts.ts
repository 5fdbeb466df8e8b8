// Fresh prompts for benchmarks on a real engine: llama.cpp's prompt cache answers a repeated prompt in a fraction of
// the time, which is not what a user's new request costs.
const WORDS =
  'amber birch cobalt dune ember fjord garnet harbor iris juniper kelp lagoon meadow nectar opal pine quartz reef sage tundra umber violet willow yarrow zephyr'.split(
    ' ',
  )
let promptSeq = 0

/**
 * A prompt no earlier request began with: a numbered, randomly worded opening, then `body`. The prompt cache reuses a
 * slot's cached prefix, so only the opening's few tokens could ever be shared.
 */
export function freshPrompt(body: string): string {
  const pick = () => WORDS[Math.floor(Math.random() * WORDS.length)]
  return `Note ${++promptSeq}-${Math.floor(Math.random() * 1e6)} ${pick()} ${pick()} ${pick()}. ${body}`
}

/** About 30 tokens after the opening: a foreground user's short question. */
export const FG_BODY = 'Write one plain sentence that describes a quiet harbor town at dawn, with boats and gulls.'
/** About 60 tokens after the opening: a background evaluation item. */
export const BG_BODY =
  'Continue the following report in the same neutral tone, adding details about the weather, the roads, the ' +
  'markets and the schools of the region, one paragraph per topic, without headings or lists: The region had a ' +
  'calm week.'
