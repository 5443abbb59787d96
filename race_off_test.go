//go:build !race

package simba_test

const raceEnabled = false
