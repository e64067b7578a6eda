package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxTreeTasks bounds the tasks amctl tree reads.
const maxTreeTasks = 10000

// taskRefs returns ids with every subtask://ID reference made a bare ID.
func taskRefs(ids []string) []string {
	if len(ids) == 0 {
		return ids
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = taskstate.NormalizeTaskID(id)
	}
	return out
}

// costRows adds a task's own cost and, when it has sub-tasks that ended,
// its subtree's, to printTask's table.
func costRows(row func(k, v string), t *agentmeshv1.Task) {
	if u := t.GetUsage(); u.GetCostUsd() > 0 {
		row("cost", money(u.GetCostUsd()))
	}
	if s := t.GetSubtreeUsage(); s.GetTotalTokens() > 0 || s.GetCostUsd() > 0 {
		row("subtree tokens", fmt.Sprint(s.GetTotalTokens()))
		row("subtree cost", money(s.GetCostUsd()))
		row("total cost", money(s.GetCostUsd()+t.GetUsage().GetCostUsd()))
	}
}

func money(v float64) string { return "$" + strconv.FormatFloat(v, 'f', 6, 64) }

// treeNode is a task and its sub-tasks.
type treeNode struct {
	task     *agentmeshv1.Task
	children []*treeNode
}

func (c *cli) tree(ctx context.Context, args []string) error {
	fs := c.flags("tree", "[--watch] ID",
		"Show a task and its sub-tasks, level by level: id, agent, status, own usage and the\n"+
			"usage of its subtree (the sub-tasks that ended). ID may be subtask://ID.\n"+
			"With --watch, print the tree again whenever it changes, until every task in it has ended.")
	watch := fs.Bool("watch", false, "follow the tree until every task in it has ended")
	every := fs.Duration("interval", time.Second, "with --watch, how often to read the tree")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if err := exactly("tree", pos, "ID"); err != nil {
		return err
	}
	if *every < 100*time.Millisecond {
		return usagef("--interval: at least 100ms")
	}
	if err := c.connect(); err != nil {
		return err
	}
	last := ""
	for {
		root, n, err := c.readTree(ctx, pos[0])
		if err != nil {
			return taskErr(pos[0], err)
		}
		var b bytes.Buffer
		if c.json() {
			err = writeTreeJSON(&b, root)
		} else {
			writeTree(&b, root, n)
		}
		if err != nil {
			return err
		}
		if out := b.String(); out != last {
			if last != "" && !c.json() {
				fmt.Fprintln(c.stdout)
			}
			_, _ = io.WriteString(c.stdout, out)
			last = out
		}
		if !*watch || treeEnded(root) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*every):
		}
	}
}

// readTree reads id's task and its sub-tasks, breadth first, by
// parent_task_id.
func (c *cli) readTree(ctx context.Context, id string) (*treeNode, int, error) {
	cctx, cancel := c.call(ctx)
	resp, err := c.tasks.GetTask(cctx, &agentmeshv1.GetTaskRequest{Id: id})
	cancel()
	if err != nil {
		return nil, 0, err
	}
	root := &treeNode{task: resp.GetTask()}
	n := 1
	level := []*treeNode{root}
	for len(level) > 0 && n < maxTreeTasks {
		var next []*treeNode
		for _, p := range level {
			token := ""
			var kids []*agentmeshv1.Task
			for {
				cctx, cancel := c.call(ctx)
				list, err := c.tasks.ListTasks(cctx, &agentmeshv1.ListTasksRequest{ParentTaskId: p.task.GetId(), PageSize: 1000, PageToken: token})
				cancel()
				if err != nil {
					return nil, 0, err
				}
				kids = append(kids, list.GetTasks()...)
				n += len(list.GetTasks())
				if token = list.GetNextPageToken(); token == "" || n >= maxTreeTasks {
					break
				}
			}
			// Newest first from the server: the tree shows them in
			// creation order.
			for i := len(kids) - 1; i >= 0; i-- {
				ch := &treeNode{task: kids[i]}
				p.children = append(p.children, ch)
				next = append(next, ch)
			}
		}
		level = next
	}
	return root, n, nil
}

func treeEnded(n *treeNode) bool {
	if !taskstate.Terminal(n.task.GetStatus()) {
		return false
	}
	for _, c := range n.children {
		if !treeEnded(c) {
			return false
		}
	}
	return true
}

func usageCell(u *agentmeshv1.Usage) string {
	if u.GetTotalTokens() == 0 && u.GetCostUsd() == 0 {
		return "-"
	}
	return fmt.Sprintf("%d tok %s", u.GetTotalTokens(), money(u.GetCostUsd()))
}

// writeTree prints the tree as a table with box-drawing branches.
func writeTree(w io.Writer, root *treeNode, n int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tAGENT\tSTATUS\tOWN\tSUBTREE")
	var walk func(t *treeNode, prefix, branch string)
	walk = func(t *treeNode, prefix, branch string) {
		st := taskstate.Name(t.task.GetStatus())
		if e := t.task.GetError(); e != "" && taskstate.Terminal(t.task.GetStatus()) {
			st += " (" + clip(e, 48) + ")"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\n", prefix+branch, t.task.GetId(), t.task.GetAgent(), st,
			usageCell(t.task.GetUsage()), usageCell(t.task.GetSubtreeUsage()))
		for i, ch := range t.children {
			next := prefix
			switch branch {
			case "├─ ":
				next += "│  "
			case "└─ ":
				next += "   "
			}
			b := "├─ "
			if i == len(t.children)-1 {
				b = "└─ "
			}
			walk(ch, next, b)
		}
	}
	walk(root, "", "")
	_ = tw.Flush()
	if n >= maxTreeTasks {
		fmt.Fprintf(w, "(the first %d tasks only)\n", maxTreeTasks)
	}
}

// writeTreeJSON prints the tree as one JSON object: {"task": Task,
// "subtasks": [...]}, each task in protojson.
func writeTreeJSON(w io.Writer, root *treeNode) error {
	var conv func(t *treeNode) (map[string]any, error)
	conv = func(t *treeNode) (map[string]any, error) {
		b, err := protojson.Marshal(t.task)
		if err != nil {
			return nil, err
		}
		out := map[string]any{"task": json.RawMessage(b)}
		var subs []any
		for _, ch := range t.children {
			m, err := conv(ch)
			if err != nil {
				return nil, err
			}
			subs = append(subs, m)
		}
		if subs != nil {
			out["subtasks"] = subs
		}
		return out, nil
	}
	m, err := conv(root)
	if err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}
