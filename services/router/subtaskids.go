package router

import (
	"context"

	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Wherever the API takes a task id it also takes the subtask://ID URI the
// delegation tools return: these interceptors rewrite, in every request,
// the string fields that hold task ids (id, task_id, parent_task_id,
// root_task_id, continue_from, depends_on) from subtask://ID to ID before
// validation and handling, so each RPC's own id checks apply unchanged.

// taskIDFields are the request fields that name tasks.
var taskIDFields = map[protoreflect.Name]bool{
	"id": true, "task_id": true, "parent_task_id": true, "root_task_id": true,
	"continue_from": true, "depends_on": true,
}

// normalizeTaskIDs rewrites subtask URIs in m's task id fields, and in the
// fields of its message fields (a SubmitTasks graph's tasks).
func normalizeTaskIDs(m protoreflect.Message, depth int) {
	if depth > 3 {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.StringKind && taskIDFields[fd.Name()] && fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				l.Set(i, protoreflect.ValueOfString(taskstate.NormalizeTaskID(l.Get(i).String())))
			}
		case fd.Kind() == protoreflect.StringKind && taskIDFields[fd.Name()] && !fd.IsMap():
			if s := v.String(); s != taskstate.NormalizeTaskID(s) {
				m.Set(fd, protoreflect.ValueOfString(taskstate.NormalizeTaskID(s)))
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				normalizeTaskIDs(l.Get(i).Message(), depth+1)
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			normalizeTaskIDs(v.Message(), depth+1)
		}
		return true
	})
}

func (s *Service) unarySubtaskIDs(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok {
		normalizeTaskIDs(m.ProtoReflect(), 0)
	}
	return handler(ctx, req)
}

func (s *Service) streamSubtaskIDs(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, idStream{ss})
}

// idStream normalises the requests a stream receives.
type idStream struct{ grpc.ServerStream }

func (s idStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		normalizeTaskIDs(pm.ProtoReflect(), 0)
	}
	return nil
}
