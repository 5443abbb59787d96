// Package cmp is the mutation tester's own test subject.
package cmp

// Less reports whether a < b; its test catches a changed boundary.
func Less(a, b int) bool { return a < b }

// Sum adds a and b; no test looks at it, so its mutants survive.
func Sum(a, b int) int { return a + b }
