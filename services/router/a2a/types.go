package a2a

import "encoding/json"

// ProtocolVersion is the A2A revision served: 0.3.0, the JSON-RPC binding
// with the method names message/send, message/stream, tasks/get,
// tasks/cancel, tasks/resubscribe, tasks/pushNotificationConfig/*,
// agent/getAuthenticatedExtendedCard.
const ProtocolVersion = "0.3.0"

// Methods served.
const (
	MethodSend         = "message/send"
	MethodStream       = "message/stream"
	MethodGet          = "tasks/get"
	MethodCancel       = "tasks/cancel"
	MethodResubscribe  = "tasks/resubscribe"
	MethodPushSet      = "tasks/pushNotificationConfig/set"
	MethodPushGet      = "tasks/pushNotificationConfig/get"
	MethodPushList     = "tasks/pushNotificationConfig/list"
	MethodPushDelete   = "tasks/pushNotificationConfig/delete"
	MethodExtendedCard = "agent/getAuthenticatedExtendedCard"
)

// A2A's error codes (JSON-RPC server errors).
const (
	CodeTaskNotFound                 = -32001
	CodeTaskNotCancelable            = -32002
	CodePushNotificationNotSupported = -32003
	CodeUnsupportedOperation         = -32004
	CodeContentTypeNotSupported      = -32005
)

// Task states.
const (
	StateSubmitted     = "submitted"
	StateWorking       = "working"
	StateInputRequired = "input-required"
	StateCompleted     = "completed"
	StateCanceled      = "canceled"
	StateFailed        = "failed"
)

// Task is an A2A task: an agentmesh task (same id).
type Task struct {
	Kind      string         `json:"kind"` // "task"
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    TaskStatus     `json:"status"`
	History   []Message      `json:"history,omitempty"`
	Artifacts []Artifact     `json:"artifacts,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// TaskStatus is where a task stands.
type TaskStatus struct {
	State     string   `json:"state"`
	Message   *Message `json:"message,omitempty"`
	Timestamp string   `json:"timestamp,omitempty"`
}

// Message is one turn of the conversation.
type Message struct {
	Kind      string         `json:"kind"` // "message"
	Role      string         `json:"role"` // "user" or "agent"
	Parts     []Part         `json:"parts"`
	MessageID string         `json:"messageId"`
	TaskID    string         `json:"taskId,omitempty"`
	ContextID string         `json:"contextId,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	// ReferenceTaskIDs and Extensions are read and ignored.
	ReferenceTaskIDs []string `json:"referenceTaskIds,omitempty"`
	Extensions       []string `json:"extensions,omitempty"`
}

// Part is a piece of a message or an artifact: text, data or a file.
type Part struct {
	Kind     string          `json:"kind"`
	Text     string          `json:"text,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	File     json.RawMessage `json:"file,omitempty"`
	Metadata map[string]any  `json:"metadata,omitempty"`
}

// Artifact is an output of a task: its answer.
type Artifact struct {
	ArtifactID  string `json:"artifactId"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	Parts       []Part `json:"parts"`
}

// StatusUpdate is a stream event: the task's status changed.
type StatusUpdate struct {
	Kind      string     `json:"kind"` // "status-update"
	TaskID    string     `json:"taskId"`
	ContextID string     `json:"contextId"`
	Status    TaskStatus `json:"status"`
	Final     bool       `json:"final"`
}

// ArtifactUpdate is a stream event: an artifact of the task.
type ArtifactUpdate struct {
	Kind      string   `json:"kind"` // "artifact-update"
	TaskID    string   `json:"taskId"`
	ContextID string   `json:"contextId"`
	Artifact  Artifact `json:"artifact"`
	LastChunk bool     `json:"lastChunk"`
}

// sendParams are message/send's and message/stream's params.
type sendParams struct {
	Message       *Message       `json:"message"`
	Configuration *sendConfig    `json:"configuration"`
	Metadata      map[string]any `json:"metadata"`
}

type sendConfig struct {
	AcceptedOutputModes []string `json:"acceptedOutputModes"`
	HistoryLength       *int     `json:"historyLength"`
	Blocking            *bool    `json:"blocking"`
	// PushNotificationConfig is refused (push notifications are not built).
	PushNotificationConfig json.RawMessage `json:"pushNotificationConfig"`
}

// idParams are the params of tasks/get, tasks/cancel, tasks/resubscribe.
type idParams struct {
	ID            string         `json:"id"`
	HistoryLength *int           `json:"historyLength"`
	Metadata      map[string]any `json:"metadata"`
}

// AgentCard describes this A2A server.
type AgentCard struct {
	ProtocolVersion      string                    `json:"protocolVersion"`
	Name                 string                    `json:"name"`
	Description          string                    `json:"description"`
	URL                  string                    `json:"url"`
	PreferredTransport   string                    `json:"preferredTransport"`
	AdditionalInterfaces []AgentInterface          `json:"additionalInterfaces"`
	Version              string                    `json:"version"`
	DocumentationURL     string                    `json:"documentationUrl,omitempty"`
	Capabilities         AgentCapabilities         `json:"capabilities"`
	SecuritySchemes      map[string]SecurityScheme `json:"securitySchemes"`
	Security             []map[string][]string     `json:"security"`
	DefaultInputModes    []string                  `json:"defaultInputModes"`
	DefaultOutputModes   []string                  `json:"defaultOutputModes"`
	Skills               []AgentSkill              `json:"skills"`
	// SupportsAuthenticatedExtendedCard: the org's agents and skills are on
	// the card an API key gets.
	SupportsAuthenticatedExtendedCard bool `json:"supportsAuthenticatedExtendedCard"`
}

// AgentInterface is a URL and the transport it speaks.
type AgentInterface struct {
	URL       string `json:"url"`
	Transport string `json:"transport"`
}

// AgentCapabilities are the optional features served.
type AgentCapabilities struct {
	Streaming              bool `json:"streaming"`
	PushNotifications      bool `json:"pushNotifications"`
	StateTransitionHistory bool `json:"stateTransitionHistory"`
}

// SecurityScheme is how to authenticate (an HTTP bearer API key).
type SecurityScheme struct {
	Type        string `json:"type"`
	Scheme      string `json:"scheme,omitempty"`
	Description string `json:"description,omitempty"`
}

// AgentSkill is something the server can do: an agent or a skill of the
// org's catalogue.
type AgentSkill struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Tags        []string `json:"tags"`
	Examples    []string `json:"examples,omitempty"`
}
