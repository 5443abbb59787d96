package mypeers

import (
	"time"

	"github.com/simba-go/simba/tests/internal/peerkit"
)

// Leadership is one spell of leadership as an elector believes it (see
// package peerkit).
type Leadership = peerkit.Leadership

func newLeadership(start time.Time) *Leadership { return peerkit.NewLeadership(start) }

// runner is the Run/Resign plumbing of the electors (peerkit.Runner).
type runner = peerkit.Runner

func newRunner() runner { return peerkit.NewRunner("mypeers") }
