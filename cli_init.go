// cli_init.go — `agentd init [DIR]`: a starter agent and a commented config.yaml, then the next command.
//
// Entry point: (*cli).initProject (the `init` row of cliCommands). Rules: works without a server; writes
// DIR/agents/helper.yaml (a valid spec: the same parser as the server checks it before it is written)
// and DIR/config.yaml (every key config.yaml accepts, commented out at its default, so the file changes
// nothing until a line is uncommented); an existing file is never overwritten without --force; the last
// line printed is the command to run next.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const starterAgent = `# A starter agent. Check it with: agentd validate %[1]s
# Run it without a server:        agentd run %[1]s "what is in /work?"
# Or keep it on a server:         agentd apply %[1]s && agentd run helper "what is in /work?"
# Every field, with its default: docs/API.md (agent spec) in the agentd repository.
apiVersion: agent/v1
name: helper
description: A general helper with its own computer.
model: auto            # a provider/model id, an alias (sonnet, haiku, gpt) or a strategy: auto, free, local
persona: |
  You are a careful assistant with a Linux computer. Work in /work. Before changing a file, read it;
  after changing code, run its tests. Say what you did and what you found, briefly.
tools: [computer, files]   # also: web (fetch_url, web_search), http (http_request)
computer:
  flavor: base         # base, python, node or full
  network:
    mode: egress       # none, egress or full
limits:
  maxSteps: 24
  maxCostUsd: 0.5      # 0: local models only
  timeoutSec: 300
guardrails:
  approvalMode: auto   # ask: a human approves shell, writes and deletes; readonly: refuse them
`

const starterConfig = `# agentd's config.yaml: every setting, commented out at its default. Uncomment a line to change it.
# A server reads it from its data directory: agentd serve --home %[1]s (or copy it to ~/.agentd/).
# A flag beats the environment, which beats this file, which beats the default; docs/configuration.md says what each does.
#
# host: 127.0.0.1              # bind address; anything but loopback needs AGENT_TOKEN
# port: 7377                   # 0 picks a free port
# corsOrigins: []              # web origins allowed to call the API
# computerProvider: auto       # auto, docker, podman, kubernetes, sandbox, local, ssh or fly
# maxComputers: 8              # live machines at once
# images: {base: debian:bookworm-slim, python: python:3.12-slim, node: node:22-slim, full: debian:bookworm}
# allowedRegistries: []        # registries a spec's image may come from (default: those of images)
# allowedMounts: []            # host directories a spec's mounts may come from
# warmPool: {}                 # flavor -> machines kept running and ready, e.g. {base: 1}
# execChannel: true            # the warm exec channel into docker and podman machines
# reaperIntervalSec: 30        # how often idle and expired machines are reaped
# model: auto                  # what an agent whose model is auto runs on
# modelAliases: {}             # alias -> provider/model id, e.g. {fast: openai/gpt-4o-mini}
# maxCostUsd: 5                # the ceiling of a direct chat call or a distill (USD)
# mcpServers: {}               # MCP servers agents may use as mcp:<name>, e.g. {files: {command: npx, args: [-y, some-mcp-server]}}
# triggers: true               # false: no http, webhook or cron triggers
# bodyLimitBytes: 33554432     # the cap on a request body (32 MB)
# metricsPublic: false         # GET /metrics without the token
# logFormat: text              # text or json
# logLevel: info               # debug, info, warn or error
# kubernetes: {namespace: agentd}   # machines as pods: kubeconfig, context, namespace, runtimeClassName, nodeSelector, tolerations, storageClassName
# ssh: {target: agent@build-box:22}  # machines as private directories on a Linux host of yours: target, key, knownHosts, acceptNewHostKeys, multiplex
# fly: {app: my-agentd-machines}     # Fly.io Machines (the token in FLY_API_TOKEN): app, region, image, ports, cpuKind, endpoint
`

func (c *cli) initProject(args []string) error {
	var force bool
	pos, err := c.flags(args, func(fs *flag.FlagSet) { fs.BoolVar(&force, "force", false, "") }, 0, 1)
	if err != nil {
		return err
	}
	dir := "."
	if len(pos) == 1 {
		dir = pos[0]
	}
	agentPath := filepath.Join(dir, "agents", "helper.yaml")
	configPath := filepath.Join(dir, "config.yaml")
	files := []struct{ path, text string }{
		{agentPath, fmt.Sprintf(starterAgent, agentPath)},
		{configPath, fmt.Sprintf(starterConfig, dir)},
	}
	if _, issues := parseSpecYAML(files[0].text); len(issues) > 0 { // a bug, never a user's mistake
		return errors.New("the starter agent does not validate: " + strings.Join(issues, "; "))
	}
	if !force {
		for _, f := range files {
			if _, err := os.Stat(f.path); err == nil {
				return exitCode{code: 1, msg: fmt.Sprintf("%s exists; nothing was written (--force overwrites)", f.path)}
			}
		}
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f.path, []byte(f.text), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "created %s\n", f.path)
	}
	fmt.Fprintf(c.stdout, "\nnext: agentd run %s \"what is in /work?\"\n", agentPath)
	return nil
}
