module agentd-bench-baseline

go 1.26
