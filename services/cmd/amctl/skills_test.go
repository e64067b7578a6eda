package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// amctl skills on the whole stack: the catalogue's life, agents offering
// skills (unknown ones refused, named), the effective settings a task
// records, agent versions, and explain showing the task analysis.
func TestSkillsCommandsOnARealStack(t *testing.T) {
	addr := realStack(t)
	tmpl := filepath.Join(t.TempDir(), "tmpl.txt")
	if err := os.WriteFile(tmpl, []byte("Translate into {{config.lang}}."), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, addr, []string{"skill translation created (version 1)"}, "skills", "create", "translation",
		"--description", "Translate text between languages, e.g. into French.", "--tool", "current_time",
		"--prompt-template-file", tmpl, "--config", "lang=French")
	mustRun(t, addr, []string{"skill sql created (version 1)"}, "skills", "create", "sql", "--description", "Write SQL queries.")
	if code, _, errOut := amctl(t, addr, "skills", "create", "sql"); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("create twice: exit %d %q", code, errOut)
	}
	if code, _, errOut := amctl(t, addr, "skills", "create", "Bad Name!"); code != 1 || !strings.Contains(errOut, "skill.name") {
		t.Errorf("bad name: exit %d %q", code, errOut)
	}
	if code, _, errOut := amctl(t, addr, "skills", "create", "x", "--tool", "teleport"); code != 1 || !strings.Contains(errOut, "teleport") {
		t.Errorf("unknown tool: exit %d %q", code, errOut)
	}
	mustRun(t, addr, []string{"NAME", "translation", "current_time", "sql", "Write SQL queries."}, "skills", "list")
	mustRun(t, addr, []string{"name:", "translation", "required tools:", "current_time", "config lang:", "French",
		"version:", "1", "Translate into {{config.lang}}."}, "skills", "get", "translation")
	mustRun(t, addr, []string{"skill translation updated (version 2)"}, "skills", "update", "translation", "--config", "lang=German", "--tool", "echo")
	out := mustRun(t, addr, []string{`"lang": "German"`, `"version": "2"`}, "skills", "get", "translation", "-o", "json")
	if !strings.Contains(out, `"current_time"`) || !strings.Contains(out, `"echo"`) || !strings.Contains(out, "Translate into") {
		t.Errorf("update kept the rest? %s", out)
	}
	if code, _, errOut := amctl(t, addr, "skills", "get", "ghost"); code != 1 || errOut != "amctl: skill ghost not found\n" {
		t.Errorf("get unknown: exit %d %q", code, errOut)
	}

	// Agents offer catalogue skills only.
	if code, _, errOut := amctl(t, addr, "agents", "create", "helper", "--tool", "echo", "--skill", "translation,klingon,elvish"); code != 1 ||
		!strings.Contains(errOut, "klingon, elvish") {
		t.Errorf("unknown skills: exit %d %q", code, errOut)
	}
	mustRun(t, addr, []string{"agent helper created (version 1)"}, "agents", "create", "helper", "--tool", "echo", "--skill", "translation",
		"--system-prompt", "You help.")
	mustRun(t, addr, []string{"agent helper updated (version 2)"}, "agents", "update", "helper", "--system-prompt", "You help a lot.")
	mustRun(t, addr, []string{"VERSION", "2", "1", "translation"}, "agents", "versions", "helper")
	mustRun(t, addr, []string{"version:", "1", "You help."}, "agents", "get", "helper", "--version", "1")
	if code, _, errOut := amctl(t, addr, "agents", "get", "helper", "--version", "7"); code != 1 || !strings.Contains(errOut, "no version 7") {
		t.Errorf("get --version 7: exit %d %q", code, errOut)
	}
	if code, _, errOut := amctl(t, addr, "skills", "delete", "translation"); code != 1 || !strings.Contains(errOut, "helper") {
		t.Errorf("delete an offered skill: exit %d %q", code, errOut)
	}

	// A task naming nothing: the fallback analysis picks translation, the
	// task records the effective settings, explain says why.
	out = mustRun(t, addr, []string{"submitted to agent helper"}, "submit", "please translate this into French")
	id := regexp.MustCompile(`task ([0-9A-Z]{26}) submitted`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no task id in %q", out)
	}
	out = mustRun(t, addr, []string{"how: scored for skills translation", "analysis: fallback", "chose translation", "analysis scores: translation"}, "explain", id[1])
	if strings.Contains(out, "no reason given") {
		t.Errorf("explain prints an empty skill list as a missing reason:\n%s", out)
	}
	out = mustRun(t, addr, nil, "get", id[1], "-o", "json")
	for _, w := range []string{"You help a lot.\\n\\nTranslate into German.", `"current_time"`, `"appliedSkills"`} {
		if !strings.Contains(out, w) {
			t.Errorf("task JSON lacks %s:\n%s", w, out)
		}
	}

	mustRun(t, addr, []string{"agent helper deleted"}, "agents", "delete", "helper")
	mustRun(t, addr, []string{"skill translation deleted"}, "skills", "delete", "translation")
	if out := mustRun(t, addr, nil, "skills", "list"); strings.Contains(out, "translation") {
		t.Errorf("deleted skill listed: %s", out)
	}
}
