// pkg/kube/active-jobs.ts against an oracle that keeps nothing but the watched copy itself: after any sequence of watch
// events (adds, updates that end or delete a Job or move it to another model or node, removals, a re-list's
// re-adds), near() answers exactly the live Jobs of the copy that are on the model in the namespace, on the node, or
// carry the label — in the order the copy first saw them, as the list walk admit did before.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ANNOTATION_MODEL, ANNOTATION_NODE, LABEL_BACKFILL } from '../../pkg/core/names.js'
import { ActiveJobs } from '../../pkg/kube/active-jobs.js'

interface Spec {
  ns: string
  name: string
  model?: string
  node?: string
  label?: string
  deleting: boolean
  outcome?: 'Complete' | 'Failed'
}

const job = (s: Spec) => ({
  metadata: {
    namespace: s.ns,
    name: s.name,
    uid: `${s.ns}-${s.name}`,
    labels: s.label ? { [LABEL_BACKFILL]: s.label } : {},
    annotations: {
      ...(s.model ? { [ANNOTATION_MODEL]: s.model } : {}),
      ...(s.node ? { [ANNOTATION_NODE]: s.node } : {}),
    },
    ...(s.deleting ? { deletionTimestamp: '2026-12-04T10:00:00Z' } : {}),
  },
  status: s.outcome ? { conditions: [{ type: s.outcome, status: 'True' }] } : {},
})

const pick = <T>(xs: readonly T[]) => fc.constantFrom(...xs)
const spec = fc.record({
  ns: pick(['a', 'b']),
  name: pick(['j1', 'j2', 'j3']),
  model: fc.option(pick(['m1', 'm2']), { nil: undefined }),
  node: fc.option(pick(['n1', 'n2']), { nil: undefined }),
  label: fc.option(pick(['b1', 'b2']), { nil: undefined }),
  // Mostly live: what near() answers.
  deleting: pick([false, false, false, true]),
  outcome: fc.option(pick(['Complete', 'Failed'] as const), { nil: undefined, freq: 4 }),
})
const event = fc.record({ spec, removed: pick([false, false, true]) })
const query = fc.record({
  ns: pick(['a', 'b']),
  model: pick(['m1', 'm2']),
  node: fc.option(pick(['n1', 'n2']), { nil: undefined }),
  label: pick(['b1', 'b2']),
})

describe('ActiveJobs', () => {
  it('answers what a walk of the watched copy answers, after any sequence of watch events', () => {
    fc.assert(
      fc.property(fc.array(event, { maxLength: 60 }), fc.array(query, { minLength: 1, maxLength: 8 }), (events, qs) => {
        const index = new ActiveJobs<ReturnType<typeof job>>()
        // The oracle: the copy as a map in first-sight order (a Map keeps insertion order; a removal forgets it).
        const copy = new Map<string, { spec: Spec; raw: ReturnType<typeof job> }>()
        for (const { spec: s, removed } of events) {
          const k = `${s.ns}/${s.name}`
          const raw = job(s)
          if (removed) {
            if (!copy.has(k)) continue // a watch removes only what it holds
            copy.delete(k)
          } else {
            const old = copy.get(k)
            if (old) old.spec = s
            if (old) old.raw = raw
            else copy.set(k, { spec: s, raw })
          }
          index.change(raw, removed)
        }
        for (const q of qs) {
          const expected = [...copy.values()]
            .filter(({ spec: s }) => !s.deleting && !s.outcome)
            .filter(
              ({ spec: s }) =>
                (s.ns === q.ns && s.model === q.model) ||
                (q.node !== undefined && s.node === q.node) ||
                (s.ns === q.ns && s.label === q.label),
            )
            .map((e) => e.raw)
          expect(index.near(q.ns, q.model, q.node, q.label)).toEqual(expected)
        }
        expect(index.size).toBe([...copy.values()].filter(({ spec: s }) => !s.deleting && !s.outcome).length)
      }),
      { numRuns: 2000 },
    )
  })
})
