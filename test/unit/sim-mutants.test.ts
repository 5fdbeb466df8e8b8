// The race-finding check (npm run sim:mutants) undoes each fix by a text edit on a copy of the tree. An edit whose
// anchor no longer matches the product code (the fix was reworded since) would make that mutant fail to apply — and
// the check would only say so when someone runs it. Checked here on every test run instead.
import { expect, it } from 'vitest'
import { MUTANTS, staleAnchors } from '../sim/mutants.js'

it('every mutant of the race-finding check still applies to the code as it is', () => {
  expect(MUTANTS.length).toBeGreaterThanOrEqual(12)
  expect(MUTANTS.flatMap((m) => staleAnchors(m))).toEqual([])
})
