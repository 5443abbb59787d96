// Package jobstest holds what the tests of package jobs share, whatever the
// backend: the configuration most of them run ([Config]), a [Recorder] of
// the runs of its handlers with the checks over them, a [Runner] that runs
// jobs.Run on a node, and the scenarios run on more than one backend
// ([TwoClientsShareTheJobs]: on the memory backend in jobs' own tests, on
// etcd in the tests module's). It imports no backend: a scenario is given a
// function that connects a node. Only tests import this package.
package jobstest
