// AckFloor (pkg/transport/ack-floor.ts): an AckAll ack is sent only for a message below which everything this process
// was given is finished — never past a message still in flight or waiting for its redelivery.
import { describe, expect, it } from 'vitest'
import { AckFloor } from '../../pkg/transport/ack-floor.js'

const msg = (seq: number, acked: number[]) => ({ seq, ack: () => acked.push(seq) })

/** Deliveries, finishes and flushes; the acks sent. */
function run(steps: ({ deliver: number } | { finish: number } | 'flush')[], max = 100) {
  const acked: number[] = []
  const floor = new AckFloor(max, () => {})
  const given = new Map<number, ReturnType<typeof msg>>()
  const refused: number[] = []
  for (const s of steps) {
    if (s === 'flush') floor.flush()
    else if ('deliver' in s) {
      const m = msg(s.deliver, acked)
      given.set(s.deliver, m)
      if (!floor.delivered(m)) refused.push(s.deliver)
    } else floor.finished(given.get(s.finish) as ReturnType<typeof msg>)
  }
  return { acked, refused, size: floor.size }
}

const d = (...seqs: number[]) => seqs.map((deliver) => ({ deliver }))
const f = (...seqs: number[]) => seqs.map((finish) => ({ finish }))

describe('AckFloor', () => {
  it.each([
    { name: 'in order: one ack for the run', steps: [...d(1, 2, 3), ...f(1, 2, 3), 'flush'], acked: [3], size: 0 },
    { name: 'an unfinished message holds the floor', steps: [...d(1, 2, 3), ...f(1, 3), 'flush'], acked: [1], size: 2 },
    {
      name: 'finished later: the floor moves past everything finished',
      steps: [...d(1, 2, 3), ...f(1, 3), 'flush', ...f(2), 'flush'],
      acked: [1, 3],
      size: 0,
    },
    { name: 'nothing finished at the bottom: no ack', steps: [...d(1, 2), ...f(2), 'flush'], acked: [], size: 2 },
    {
      name: 'a redelivery below the others (after a restart) holds them',
      steps: [...d(10, 11, 5), ...f(10, 11), 'flush', ...f(5), 'flush'],
      acked: [11],
      size: 0,
    },
    {
      name: 'a redelivery of a finished, unacked message makes it unfinished again',
      steps: [...d(1, 2), ...f(2), ...d(2), ...f(1), 'flush'],
      acked: [1],
      size: 1,
    },
    {
      name: 'a finish of the superseded delivery does not count',
      steps: [...d(1), { deliver: 1 }, 'flush'],
      acked: [],
      size: 1,
    },
  ] as const)('$name', ({ steps, acked, size }) => {
    const r = run(steps as unknown as Parameters<typeof run>[0])
    expect(r.acked).toEqual(acked)
    expect(r.size).toBe(size)
  })

  it('bounded: past max it refuses (the caller naks), and a gap still never gets acked past', () => {
    const r = run([...d(1, 2, 3), ...f(1, 3), 'flush'], 2)
    expect(r.refused).toEqual([3])
    expect(r.acked).toEqual([1])
  })

  it('schedules one flush per run of finishes at the floor', () => {
    const flushes: (() => void)[] = []
    const acked: number[] = []
    const floor = new AckFloor(10, (fl) => flushes.push(fl))
    const ms = [1, 2, 3].map((s) => msg(s, acked))
    for (const m of ms) floor.delivered(m)
    floor.finished(ms[1] as (typeof ms)[1])
    expect(flushes).toHaveLength(0) // not at the floor
    floor.finished(ms[0] as (typeof ms)[0])
    floor.finished(ms[2] as (typeof ms)[2])
    expect(flushes).toHaveLength(1)
    flushes[0]?.()
    expect(acked).toEqual([3])
  })
})
