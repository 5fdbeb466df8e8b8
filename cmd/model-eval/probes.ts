// The coherence probes: deterministic prompts (temperature 0, a fixed seed) with the answer each expects, in the chat
// shape and the legacy completion shape (base models continue text; they do not follow instructions). The set has a
// version, stored with every result: changing a prompt or an expectation changes what a verdict means, so it gets a
// new version and results of different versions are never compared as equals.
import { type OpenAiClient, WorkloadError } from './openai.js'
import type { GauntletApi } from './settings.js'

export const PROBE_SET_VERSION = 'mbf-probes-1'

export interface Probe {
  id: string
  chat: string
  completion: string
  /** What a coherent answer contains (matched case-insensitively against the answer's first 512 characters). */
  expect: RegExp
  maxTokens: number
}

/** The readiness probe: the model says back the readiness word (GAUNTLET_EXPECT) and nothing gets in the way. */
export function readinessProbe(word: string): Probe {
  const quoted = word.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  return {
    id: 'readiness',
    chat: `Reply with the single word ${word} and nothing else.`,
    completion: `The operator asked the system to reply with the word ${word}. The system replied: ${word}. Again, the system replied:`,
    expect: new RegExp(`\\b${quoted}\\b`, 'i'),
    maxTokens: 8,
  }
}

export function probeSet(readinessWord: string): Probe[] {
  return [
    readinessProbe(readinessWord),
    {
      id: 'arithmetic',
      chat: 'What is 17 + 25? Answer with the number only.',
      completion: 'Question: What is 17 + 25?\nAnswer: 17 + 25 =',
      expect: /\b42\b/,
      maxTokens: 8,
    },
    {
      id: 'capital',
      chat: 'What is the capital city of France? Answer with one word.',
      completion: 'The capital city of France is the city of',
      expect: /\bparis\b/i,
      maxTokens: 8,
    },
    {
      id: 'sequence',
      chat: 'Continue the sequence with the next day only: Monday, Tuesday,',
      completion: 'The days of the week in order are Monday, Tuesday,',
      expect: /\bwednesday\b/i,
      maxTokens: 8,
    },
    {
      id: 'antonym',
      chat: 'What is the opposite of the word "hot"? Answer with one word.',
      completion: 'The opposite of hot is',
      expect: /\bcold\b/i,
      maxTokens: 8,
    },
  ]
}

export interface ProbeEvidence {
  probe: string
  api: GauntletApi
  prompt: string
  expected: string
  /** The answer's first 512 characters. */
  answer?: string
  pass: boolean
  latencyMs?: number
  /** Why there is no answer to judge (unreachable, not served, malformed …). */
  error?: { kind: string; message: string }
}

export const MAX_EVIDENCE_CHARS = 512

export async function runProbe(
  client: OpenAiClient,
  api: GauntletApi,
  model: string,
  probe: Probe,
): Promise<ProbeEvidence> {
  const prompt = api === 'chat' ? probe.chat : probe.completion
  const base = { probe: probe.id, api, prompt, expected: probe.expect.source }
  try {
    const c = await client.complete(api, model, prompt, probe.maxTokens)
    const answer = c.text.slice(0, MAX_EVIDENCE_CHARS)
    return { ...base, answer, pass: probe.expect.test(answer), latencyMs: Math.round(c.latencyMs) }
  } catch (err) {
    if (err instanceof WorkloadError && err.kind !== 'aborted')
      return { ...base, pass: false, error: { kind: err.kind, message: err.message.slice(0, MAX_EVIDENCE_CHARS) } }
    throw err
  }
}

export interface Verdict {
  pass: boolean
  passed: number
  total: number
  /** The probes that failed, by id. */
  failed: string[]
}

/** Pass when every probe passed: coherence is all of them, a model that cannot add is not coherent. */
export function verdictOf(evidence: readonly ProbeEvidence[]): Verdict {
  const failed = evidence.filter((e) => !e.pass).map((e) => e.probe)
  return {
    pass: evidence.length > 0 && failed.length === 0,
    passed: evidence.length - failed.length,
    total: evidence.length,
    failed,
  }
}
