package rest

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// strictQuery is the gateway's query parser: the default one, but a
// parameter that names no field of the call's request is refused, as an
// unknown field of a body is (the default ignores it, so a misspelt
// filter — ?statsues=… — listed everything).
type strictQuery struct{ runtime.DefaultQueryParser }

// paramName is what a query parameter that names a field looks like (a
// field path, a map's key in brackets). Anything else — what a form
// parser makes of the rest of a JSON body the gateway's decoder left
// unread — is no misspelt field and is left to the default parser.
var paramName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:\[[^\]]*\])?$`)

// Parse refuses the first parameter (in name order) that names no field,
// then parses the query as the default parser does.
func (q *strictQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	desc := msg.ProtoReflect().Descriptor()
	for _, k := range keys {
		m := paramName.FindStringSubmatch(k)
		if m == nil || hasFieldPath(desc, strings.Split(m[1], ".")) {
			continue
		}
		// decodeError reads "parsing field" and names the parameter.
		return fmt.Errorf("parsing field %q: unknown parameter of %s (it takes %s)", k, desc.Name(), fieldNames(desc))
	}
	return q.DefaultQueryParser.Parse(msg, values, filter)
}

// hasFieldPath reports whether path names a field of desc (by proto or
// JSON name), through singular message fields.
func hasFieldPath(desc protoreflect.MessageDescriptor, path []string) bool {
	for i, name := range path {
		f := desc.Fields().ByName(protoreflect.Name(name))
		if f == nil {
			f = desc.Fields().ByJSONName(name)
		}
		if f == nil {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		if f.Message() == nil || f.IsList() || f.IsMap() {
			return false
		}
		desc = f.Message()
	}
	return false
}

// fieldNames lists desc's fields by proto name.
func fieldNames(desc protoreflect.MessageDescriptor) string {
	names := make([]string, 0, desc.Fields().Len())
	for i := 0; i < desc.Fields().Len(); i++ {
		names = append(names, string(desc.Fields().Get(i).Name()))
	}
	return strings.Join(names, ", ")
}
