// dev/bench/deletion-watch.ts: a Job name that comes back (a backfill deleted and made again names its attempts as
// before) is measured from the new Job's events, never from the earlier Job's deletion or pods.
import { describe, expect, it } from 'vitest'
import { DeletionWatch } from '../../dev/bench/deletion-watch.js'

describe('DeletionWatch', () => {
  it("records a Job's deletion once, and forgets it when a new Job takes the name", () => {
    const w = new DeletionWatch()
    w.noteJob('w-1-1', 'uid-a', false, false, 10)
    w.notePod('w-1-1-x', 'w-1-1', 'uid-a', false, 11)
    expect(w.noteJob('w-1-1', 'uid-a', true, false, 100)).toBe(100)
    expect(w.noteJob('w-1-1', 'uid-a', false, true, 105)).toBeUndefined() // its removal: recorded already
    w.notePod('w-1-1-x', 'w-1-1', 'uid-a', true, 103)
    expect(w.goneAt('w-1-1', w.podsOf('w-1-1'))).toBe(103)

    // The name again, a new Job: nothing deleted yet, no pods of its own yet.
    w.noteJob('w-1-1', 'uid-b', false, false, 500)
    expect(w.jobDeletedAt.has('w-1-1')).toBe(false)
    expect(w.podsOf('w-1-1')).toEqual([])
    expect(w.goneAt('w-1-1', [])).toBeUndefined()
    w.notePod('w-1-1-y', 'w-1-1', 'uid-b', false, 510)
    expect(w.podsOf('w-1-1')).toEqual(['w-1-1-y'])
    // A late event of the earlier Job's removal changes nothing.
    expect(w.noteJob('w-1-1', 'uid-a', false, true, 520)).toBeUndefined()
    expect(w.noteJob('w-1-1', 'uid-b', true, false, 600)).toBe(600)
    w.notePod('w-1-1-y', 'w-1-1', 'uid-b', true, 604)
    expect(w.goneAt('w-1-1', w.podsOf('w-1-1'))).toBe(604)
  })

  it("keeps a pod seen before its Job's event aside and gives it to that Job when it shows up", () => {
    const w = new DeletionWatch()
    w.noteJob('w-2-1', 'uid-a', false, true, 10) // an earlier Job, gone
    w.notePod('w-2-1-new', 'w-2-1', 'uid-b', false, 20) // the new Job's pod, its Job not seen yet
    expect(w.podsOf('w-2-1')).toEqual([])
    w.noteJob('w-2-1', 'uid-b', false, false, 25)
    expect(w.podsOf('w-2-1')).toEqual(['w-2-1-new'])
    expect(w.jobDeletedAt.has('w-2-1')).toBe(false)
  })
})
