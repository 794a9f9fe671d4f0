module agentd-hostile

go 1.26
