//go:build race

package simba_test

// raceEnabled reports a build with the race detector, which runs the
// simulator about ten times slower.
const raceEnabled = true
