package state

import (
	"context"
	"fmt"
	"sync"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// MaxHistoryBatch bounds the requests of one task.history.batch.
const MaxHistoryBatch = 512

// historyBatchWorkers bounds the store reads one batch runs at once.
const historyBatchWorkers = 8

// historyBatch answers each history request of a batch as history would,
// each with its own response or error: one bad item does not fail the
// others.
func (s *Service) historyBatch(ctx context.Context, req *busv1.HistoryBatchRequest) (*busv1.HistoryBatchResponse, error) {
	n := len(req.Requests)
	if n > MaxHistoryBatch {
		return nil, bus.FieldError("requests", "%d requests; at most %d per batch", n, MaxHistoryBatch)
	}
	items := make([]*busv1.HistoryBatchItem, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, historyBatchWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				resp, err := s.history(ctx, req.Requests[i])
				if err != nil {
					if bus.CodeOf(err) == bus.CodeInternal {
						s.log.ErrorContext(ctx, "history in a batch failed", "task_id", req.Requests[i].GetTaskId(), "err", err)
					}
					items[i] = &busv1.HistoryBatchItem{Error: bus.ToProto(err)}
					continue
				}
				items[i] = &busv1.HistoryBatchItem{Response: resp}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return &busv1.HistoryBatchResponse{Items: items}, nil
}

// MaxDispatchBatch bounds the moves of one task.dispatch.batch: one group
// of the store's group commit.
const MaxDispatchBatch = store.MaxGroup

// dispatchBatch applies each move of a batch as the task.dispatch intent
// would, each with its own outcome (one refused or lost compare-and-set
// does not fail the others). The moves run at once, so the store commits
// them together (store.GroupCommit) and their events are published and
// acknowledged together; each event still goes out in its task's trace,
// after its own commit. The reply holds every item's task while it fits
// in one bus message (fitDispatchBatch).
func (s *Service) dispatchBatch(ctx context.Context, req *busv1.DispatchBatchRequest) (*busv1.DispatchBatchResponse, error) {
	n := len(req.Requests)
	if n > MaxDispatchBatch {
		return nil, bus.FieldError("requests", "%d requests; at most %d per batch", n, MaxDispatchBatch)
	}
	dispatch := s.intentHandler(intentNamed(subjects.StateDispatch))
	items := make([]*busv1.DispatchBatchItem, n)
	var wg sync.WaitGroup
	for i, r := range req.Requests {
		wg.Go(func() {
			if r == nil {
				items[i] = &busv1.DispatchBatchItem{Error: bus.ToProto(bus.FieldError(fmt.Sprintf("requests[%d]", i), "a request is required"))}
				return
			}
			resp, err := dispatch(ctx, r)
			if err != nil {
				if bus.CodeOf(err) == bus.CodeInternal {
					s.log.ErrorContext(ctx, "dispatch in a batch failed", "task_id", r.TaskId, "err", err)
				}
				items[i] = &busv1.DispatchBatchItem{Error: bus.ToProto(err)}
				return
			}
			items[i] = &busv1.DispatchBatchItem{Response: resp}
		})
	}
	wg.Wait()
	fitDispatchBatch(items, dispatchReplyBudget)
	return &busv1.DispatchBatchResponse{Items: items}, nil
}

// dispatchReplyBudget is what a batch's reply may hold: one bus message,
// with room for headers and framing.
const dispatchReplyBudget = bus.MaxPayload - 64<<10

// fitDispatchBatch keeps a batch's reply within budget bytes: the items
// past it keep their event but not their task (task_omitted), which the
// caller reads on its own. The moves are committed already, so nothing is
// dropped but a copy of the task.
func fitDispatchBatch(items []*busv1.DispatchBatchItem, budget int) {
	size := 0
	for _, it := range items {
		size += proto.Size(it) + 8
		if size <= budget || it.Response.GetTask() == nil {
			continue
		}
		size -= proto.Size(it.Response.Task)
		it.Response.Task = nil
		it.TaskOmitted = true
	}
}
