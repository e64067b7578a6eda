package store

import (
	"context"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// The Remembering part of Instrument (memory.go).

func (i instrumented) PutState(ctx context.Context, rec *busv1.StateRecord) (ok bool, err error) {
	defer func(start time.Time) { observe("put_state", start, err) }(time.Now())
	return i.s.PutState(ctx, rec)
}

func (i instrumented) GetState(ctx context.Context, k StateKey, now time.Time) (r *busv1.StateRecord, err error) {
	defer func(start time.Time) { observe("get_state", start, err) }(time.Now())
	return i.s.GetState(ctx, k, now)
}

func (i instrumented) DeleteState(ctx context.Context, k StateKey, upTo int64) (ok bool, err error) {
	defer func(start time.Time) { observe("delete_state", start, err) }(time.Now())
	return i.s.DeleteState(ctx, k, upTo)
}

func (i instrumented) ListState(ctx context.Context, q StateQuery) (rs []*busv1.StateRecord, next string, err error) {
	defer func(start time.Time) { observe("list_state", start, err) }(time.Now())
	return i.s.ListState(ctx, q)
}

func (i instrumented) DeleteExpiredState(ctx context.Context, t time.Time) (n int, err error) {
	defer func(start time.Time) { observe("delete_expired_state", start, err) }(time.Now())
	return i.s.DeleteExpiredState(ctx, t)
}

func (i instrumented) PutMemory(ctx context.Context, rec *busv1.MemoryRecord) (out *busv1.MemoryRecord, created bool, err error) {
	defer func(start time.Time) { observe("put_memory", start, err) }(time.Now())
	return i.s.PutMemory(ctx, rec)
}

func (i instrumented) GetMemory(ctx context.Context, org, id string) (r *busv1.MemoryRecord, err error) {
	defer func(start time.Time) { observe("get_memory", start, err) }(time.Now())
	return i.s.GetMemory(ctx, org, id)
}

func (i instrumented) ListMemories(ctx context.Context, q MemoryQuery) (ms []*agentmeshv1.Memory, next string, err error) {
	defer func(start time.Time) { observe("list_memories", start, err) }(time.Now())
	return i.s.ListMemories(ctx, q)
}

func (i instrumented) DeleteMemories(ctx context.Context, org string, ids []string) (ms []*agentmeshv1.Memory, err error) {
	defer func(start time.Time) { observe("delete_memories", start, err) }(time.Now())
	return i.s.DeleteMemories(ctx, org, ids)
}

func (i instrumented) MemoryChanges(ctx context.Context, org, cursor string, limit int) (cs []MemoryChange, next string, err error) {
	defer func(start time.Time) { observe("memory_changes", start, err) }(time.Now())
	return i.s.MemoryChanges(ctx, org, cursor, limit)
}

func (i instrumented) MemoryCursor(ctx context.Context, org string) (c string, err error) {
	defer func(start time.Time) { observe("memory_cursor", start, err) }(time.Now())
	return i.s.MemoryCursor(ctx, org)
}

func (i instrumented) ExpireMemories(ctx context.Context, createdBefore, forgetBefore time.Time) (n int, err error) {
	defer func(start time.Time) { observe("expire_memories", start, err) }(time.Now())
	return i.s.ExpireMemories(ctx, createdBefore, forgetBefore)
}

func (i instrumented) GetThread(ctx context.Context, org, id string) (th *agentmeshv1.Thread, err error) {
	defer func(start time.Time) { observe("get_thread", start, err) }(time.Now())
	return i.s.GetThread(ctx, org, id)
}

func (i instrumented) PutThread(ctx context.Context, th *agentmeshv1.Thread, expected int64) (out *agentmeshv1.Thread, err error) {
	defer func(start time.Time) { observe("put_thread", start, err) }(time.Now())
	return i.s.PutThread(ctx, th, expected)
}

func (i instrumented) ListThreads(ctx context.Context, org string, pageSize int, pageToken string) (ths []*agentmeshv1.Thread, next string, err error) {
	defer func(start time.Time) { observe("list_threads", start, err) }(time.Now())
	return i.s.ListThreads(ctx, org, pageSize, pageToken)
}

func (i instrumented) DeleteThread(ctx context.Context, org, id string, expected int64) (err error) {
	defer func(start time.Time) { observe("delete_thread", start, err) }(time.Now())
	return i.s.DeleteThread(ctx, org, id, expected)
}
