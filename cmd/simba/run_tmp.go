package main

import "github.com/simba-go/simba/jobs"

// TEMPORARY until jobs is merged.
func commandJobs(cfg jobs.Config) jobs.Config {
	var out jobs.Config
	out.Disabled = cfg.Disabled
	for _, j := range cfg.Scheduled {
		if len(j.Command) > 0 {
			out.Scheduled = append(out.Scheduled, j)
		}
	}
	for _, j := range cfg.Partitioned {
		if len(j.Command) > 0 {
			out.Partitioned = append(out.Partitioned, j)
		}
	}
	return out
}
