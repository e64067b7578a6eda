package llm

import (
	"context"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/pkg/modeltable"
)

// Rate limits. A model call spends budget in every scope it belongs to:
// its provider key (the model table entry's limit key; "key.<key>"), its
// org ("org.<org>", the table's orgs) and its agent when the agent sets
// limits ("agent.<org>.<agent>"). Each scope is a generic cell rate
// (GCRA: a token bucket kept as one time) per dimension: requests are
// spaced window/limit apart (Burst of them may go at once), tokens fill a
// bucket of one window's tokens. A call is given a slot: now when every
// scope has budget, else the first time every one has. The budget is
// spent when the slot is given (reserved), so callers that ask together
// get slots one after the other, not all the same time.
//
// The Limiter keeps the scopes' state where every executor sees it: the
// executor's is a JetStream KV bucket updated by compare-and-set
// (services/executor/ratelimit); NewLocalLimiter keeps it in memory (one
// process). Limits the provider reports in its headers are learned into
// the key's scope (the lower of the operator's and the provider's wins),
// and a key the provider says is spent (remaining 0, or a 429) is paused
// until its reset, for every executor.

// Scope is one budget a call spends.
type Scope struct {
	// Key names it in the limiter: "key.<limit key>", "org.<org>",
	// "agent.<org>.<agent>".
	Key    string
	Limits modeltable.Limits
	// Learn: the provider's headers teach this scope (the key's).
	Learn bool
}

// Ask is a request for a slot.
type Ask struct {
	Scopes []Scope
	// Tokens the call is expected to spend (its prompt's estimate plus
	// max_tokens); Settle corrects it.
	Tokens int64
	// Within: when the first slot is later than now+Within, the budget is
	// not spent (Grant.Charged is false) unless Always.
	Within time.Duration
	Always bool
}

// Grant is the slot given.
type Grant struct {
	At      time.Time
	Charged bool
	// Scope is the scope whose budget set At (when later than now).
	Scope  string
	Tokens int64
	Scopes []Scope
}

// Learned is what a provider's headers said of a key.
type Learned struct {
	RPM         int
	TPM         int64
	PausedUntil time.Time
}

// Limiter gives model calls their slots, across every executor.
type Limiter interface {
	// Reserve gives the call of ask its slot, spending the budget of every
	// scope when Charged.
	Reserve(ctx context.Context, ask Ask) (Grant, error)
	// Settle corrects the tokens g spent to the tokens the call used.
	Settle(ctx context.Context, g Grant, used int64) error
	// Learn folds what a provider said of scope's key in.
	Learn(ctx context.Context, scope string, l Learned) error
	// Keep remembers the slot at, reserved in scope key, for task's next
	// call; Kept returns (and forgets) it.
	Keep(ctx context.Context, task, key string, at time.Time) error
	Kept(ctx context.Context, task string) (key string, at time.Time, ok bool, err error)
}

// BucketState is one scope's state: the theoretical arrival times of the
// next request and of the token bucket's debt (unix ns), a pause, and
// the limits learned from the provider (0: none).
type BucketState struct {
	ReqTAT int64 `json:"r,omitempty"`
	TokTAT int64 `json:"t,omitempty"`
	Paused int64 `json:"p,omitempty"`
	RPM    int   `json:"lr,omitempty"`
	TPM    int64 `json:"lt,omitempty"`
}

// effective are the limits of a scope: the operator's, lowered by what
// the provider said.
func (s *BucketState) effective(l modeltable.Limits) modeltable.Limits {
	if s.RPM > 0 && (l.RequestsPerMinute == 0 || s.RPM < l.RequestsPerMinute) {
		l.RequestsPerMinute = s.RPM
	}
	if s.TPM > 0 && (l.TokensPerMinute == 0 || s.TPM < l.TokensPerMinute) {
		l.TokensPerMinute = s.TPM
	}
	return l
}

// Slot is the first time at or after now that a call of tokens fits l.
func (s *BucketState) Slot(now time.Time, l modeltable.Limits, window time.Duration, tokens int64) time.Time {
	l = s.effective(l)
	at := now.UnixNano()
	at = max(at, s.Paused)
	if r := l.RequestsPerMinute; r > 0 {
		t := int64(window) / int64(r)
		tau := int64(max(l.Burst, 1)-1) * t
		at = max(at, s.ReqTAT-tau)
	}
	if tpm := l.TokensPerMinute; tpm > 0 && tokens > 0 {
		cost := min(tokenCost(window, tpm, tokens), int64(window))
		at = max(at, s.TokTAT+cost-int64(window))
	}
	return time.Unix(0, at)
}

// Spend spends one call of tokens at slot.
func (s *BucketState) Spend(slot time.Time, l modeltable.Limits, window time.Duration, tokens int64) {
	l = s.effective(l)
	at := slot.UnixNano()
	if r := l.RequestsPerMinute; r > 0 {
		s.ReqTAT = max(s.ReqTAT, at) + int64(window)/int64(r)
	}
	if tpm := l.TokensPerMinute; tpm > 0 && tokens > 0 {
		s.TokTAT = max(s.TokTAT, at) + tokenCost(window, tpm, tokens)
	}
}

// Raise makes the state at least as spent as a call of tokens at slot
// would have left it (Spend at a later slot than one already spent at;
// never lowers it).
func (s *BucketState) Raise(slot time.Time, l modeltable.Limits, window time.Duration, tokens int64) {
	l = s.effective(l)
	at := slot.UnixNano()
	if r := l.RequestsPerMinute; r > 0 {
		s.ReqTAT = max(s.ReqTAT, at+int64(window)/int64(r))
	}
	if tpm := l.TokensPerMinute; tpm > 0 && tokens > 0 {
		s.TokTAT = max(s.TokTAT, at+tokenCost(window, tpm, tokens))
	}
}

// Correct adds delta tokens (negative: gives back) to the token debt.
func (s *BucketState) Correct(l modeltable.Limits, window time.Duration, delta int64) {
	l = s.effective(l)
	if tpm := l.TokensPerMinute; tpm > 0 && delta != 0 && s.TokTAT != 0 {
		if delta > 0 {
			s.TokTAT += tokenCost(window, tpm, delta)
		} else {
			s.TokTAT -= tokenCost(window, tpm, -delta)
		}
	}
}

// Learn folds what the provider said in.
func (s *BucketState) Learn(l Learned) {
	if l.RPM > 0 {
		s.RPM = l.RPM
	}
	if l.TPM > 0 {
		s.TPM = l.TPM
	}
	if p := l.PausedUntil.UnixNano(); !l.PausedUntil.IsZero() && p > s.Paused {
		s.Paused = p
	}
}

// LimitMargin is how much longer than the limits' window the limiter
// spaces calls over: a twentieth of it, at most 2 s (a minute's limits
// are kept over 62 s). A call may then leave up to that much after its
// slot (a task dispatched late for a slot reserved for it) and no window
// of the provider's still holds more than its limit.
func LimitMargin(window time.Duration) time.Duration { return min(window/20, 2*time.Second) }

// spacing is the window calls are spaced over (LimitMargin).
func spacing(window time.Duration) time.Duration { return window + LimitMargin(window) }

// tokenCost is the time tokens take of a budget of tpm per window.
func tokenCost(window time.Duration, tpm, tokens int64) int64 {
	return int64(float64(window) * float64(tokens) / float64(tpm))
}

// localLimiter is a Limiter of one process.
type localLimiter struct {
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	states map[string]*BucketState
	slots  map[string]kept
}

// NewLocalLimiter is a Limiter in this process's memory (one executor;
// tests): window is the limits' minute.
func NewLocalLimiter(window time.Duration) Limiter {
	if window <= 0 {
		window = time.Minute
	}
	return &localLimiter{window: spacing(window), now: time.Now, states: map[string]*BucketState{}, slots: map[string]kept{}}
}

func (l *localLimiter) state(key string) *BucketState {
	s := l.states[key]
	if s == nil {
		s = &BucketState{}
		l.states[key] = s
	}
	return s
}

func (l *localLimiter) Reserve(_ context.Context, ask Ask) (Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	g := Grant{At: now, Tokens: ask.Tokens, Scopes: ask.Scopes}
	for _, sc := range ask.Scopes {
		if at := l.state(sc.Key).Slot(now, sc.Limits, l.window, ask.Tokens); at.After(g.At) {
			g.At, g.Scope = at, sc.Key
		}
	}
	if !ask.Always && g.At.Sub(now) > ask.Within {
		return g, nil
	}
	for _, sc := range ask.Scopes {
		l.state(sc.Key).Spend(g.At, sc.Limits, l.window, ask.Tokens)
	}
	g.Charged = true
	return g, nil
}

func (l *localLimiter) Settle(_ context.Context, g Grant, used int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, sc := range g.Scopes {
		l.state(sc.Key).Correct(sc.Limits, l.window, used-g.Tokens)
	}
	return nil
}

func (l *localLimiter) Learn(_ context.Context, scope string, learned Learned) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state(scope).Learn(learned)
	return nil
}

func (l *localLimiter) Keep(_ context.Context, task, key string, at time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slots[task] = kept{key: key, at: at}
	return nil
}

func (l *localLimiter) Kept(_ context.Context, task string) (string, time.Time, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.slots[task]
	delete(l.slots, task)
	return k.key, k.at, ok, nil
}
