// main_reload.go — config.yaml while the server runs: SIGHUP re-reads it (issue 26) and applies what can
// change live; what cannot is named in the log and waits for a restart.
//
// Entry points: runServe (main.go) routes SIGHUP into server.reloads; the reload goroutine is started
// by newServer (startReloader) and stopped by server.Close. reloadConfig does one reload; takesEffect is
// the phrase every hint that sends a user to config.yaml ends with.
//
// Rules: a reload reads the file with the same flags and environment as the start (precedence holds);
// a file that does not parse or check changes nothing and logs why; live keys (liveConfigKeys) apply at
// once; the others keep their running value and are logged as needing a restart. Readers of a live
// setting go through s.conf(), c.conf() (computers) or m.aliasMap() (models), never a copy taken at start.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
)

// liveConfigKeys are the config.yaml keys a reload applies while the server runs.
var liveConfigKeys = []string{"corsOrigins", "maxComputers", "images", "allowedRegistries", "allowedMounts",
	"modelAliases", "maxCostUsd", "logLevel", "metricsPublic", "model"}

// takesEffect says how a change of config.yaml's key takes effect, for the hints that send users there.
// An empty key is any key: the phrase names both ways.
func takesEffect(key string) string {
	if key == "" {
		return "then `kill -HUP <agentd pid>` (images, limits, policies, models, logLevel) or restart agentd (the rest)"
	}
	if slices.Contains(liveConfigKeys, key) {
		return "then `kill -HUP <agentd pid>` or restart agentd"
	}
	return "then restart agentd (" + key + " is read only at start)"
}

// conf is the running configuration: the start's, then each reload's (live keys only change).
func (s *server) conf() *config {
	if p := s.live.Load(); p != nil {
		return p
	}
	return &s.cfg
}

// startReloader runs the reload goroutine: one reload per value on s.reloads until Close.
func (s *server) startReloader() {
	s.reloads = make(chan os.Signal, 1)
	s.reloaderDone = make(chan struct{})
	go func() {
		defer close(s.reloaderDone)
		for {
			select {
			case <-s.streamCtx.Done():
				return
			case <-s.reloads:
				s.reloadConfig()
			}
		}
	}()
}

// reloadConfig re-reads config.yaml and applies the live keys; it logs what changed and what needs a
// restart. It returns both lists (for tests and the log).
func (s *server) reloadConfig() (applied, restart []string, err error) {
	cur := s.conf()
	// The same data directory, whatever set it; the running token (a token file may be gone by now).
	var args []string
	for i := 0; i < len(s.cfg.serveArgs); i++ {
		a := strings.TrimLeft(s.cfg.serveArgs[i], "-")
		switch {
		case a == "token-file":
			i++
		case !strings.HasPrefix(a, "token-file="):
			args = append(args, s.cfg.serveArgs[i])
		}
	}
	args = append(args, "--home", s.cfg.Home)
	getenv := func(k string) string {
		if k == "AGENT_TOKEN" {
			return s.cfg.Token
		}
		return s.cfg.getenv(k)
	}
	next, err := loadConfig(args, getenv, io.Discard)
	if err == nil {
		err = checkAliases(next.ModelAliases)
	}
	if err != nil {
		var ae *apiError
		hint := ""
		if errors.As(err, &ae) {
			hint = ae.Hint
		}
		s.log.Error("config.yaml not reloaded: the running settings stay", "err", err.Error(), "hint", hint)
		return nil, nil, err
	}
	live := *cur
	cv, nv, lv := reflect.ValueOf(*cur), reflect.ValueOf(next), reflect.ValueOf(&live).Elem()
	t := cv.Type()
	for i := range t.NumField() {
		key := t.Field(i).Tag.Get("yaml")
		if key == "" || key == "-" || reflect.DeepEqual(cv.Field(i).Interface(), nv.Field(i).Interface()) {
			continue
		}
		if !slices.Contains(liveConfigKeys, key) {
			restart = append(restart, key)
			continue
		}
		applied = append(applied, key)
		lv.Field(i).Set(nv.Field(i))
	}
	s.models.setAliases(live.ModelAliases)
	s.computers.reconfigure(computerConf{images: live.Images, registries: live.AllowedRegistries,
		mountRoots: live.AllowedMounts, maxComputers: live.MaxComputers})
	if s.cfg.level != nil {
		s.cfg.level.Set(logLevels[live.LogLevel])
	}
	s.live.Store(&live)
	switch {
	case len(applied) == 0 && len(restart) == 0:
		s.log.Info("config.yaml reloaded: nothing changed")
	case len(applied) > 0:
		s.log.Info("config.yaml reloaded", "applied", strings.Join(applied, ","))
	}
	if len(restart) > 0 {
		s.log.Warn(fmt.Sprintf("config.yaml: %s changed but take effect only after a restart; the running values stay", strings.Join(restart, ", ")),
			"restart", strings.Join(restart, ","))
	}
	return applied, restart, nil
}

// newLevel is the logger's level, which a reload may change (logLevel).
func newLevel(name string) *slog.LevelVar {
	v := new(slog.LevelVar)
	v.Set(logLevels[name])
	return v
}
