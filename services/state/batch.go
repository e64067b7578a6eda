package state

import (
	"context"
	"sync"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
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
