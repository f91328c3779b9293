package compose

import (
	"maps"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// Prefixes of the composed-resource keys of a replica's ModelReplica and
// ModelEndpoint: ReplicaKey and EndpointKey.
const (
	replicaKeyPrefix  = "replica-"
	endpointKeyPrefix = "endpoint-"
)

// IsReplicaKey is whether a composed-resource key is a ModelReplica's.
func IsReplicaKey(key string) bool { return strings.HasPrefix(key, replicaKeyPrefix) }

// IsComposedKey is whether a composed-resource key is one this function
// composes: a ModelReplica's or a ModelEndpoint's.
func IsComposedKey(key string) bool {
	return IsReplicaKey(key) || strings.HasPrefix(key, endpointKeyPrefix)
}

// EndpointKeyOf is the composed-resource key of the ModelEndpoint of the
// ModelReplica composed under key.
func EndpointKeyOf(replicaKey string) string {
	return endpointKeyPrefix + strings.TrimPrefix(replicaKey, replicaKeyPrefix)
}

// IsReady reads an observed composed resource's Ready condition.
func IsReady(s *structpb.Struct) bool {
	conds := s.GetFields()["status"].GetStructValue().GetFields()["conditions"].GetListValue().GetValues()
	for _, c := range conds {
		f := c.GetStructValue().GetFields()
		if f["type"].GetStringValue() == "Ready" {
			return f["status"].GetStringValue() == "True"
		}
	}
	return false
}

// ReplicaFromObserved keeps what is composed of a ModelReplica kept as
// observed, as DesiredFromObserved does, but labels it not counted: what it
// was labelled when last composed may be stale, and a replica labelled not
// counted is never missed (docs/spec.md#narrow-requests).
func ReplicaFromObserved(s *structpb.Struct) *structpb.Struct {
	out := DesiredFromObserved(s)
	md := out.GetFields()["metadata"].GetStructValue()
	fields := maps.Clone(md.GetFields()["labels"].GetStructValue().GetFields())
	if fields == nil {
		fields = map[string]*structpb.Value{}
	}
	fields[v1alpha1.LabelCounted] = structpb.NewStringValue("false")
	labels := &structpb.Struct{Fields: fields}
	md.Fields["labels"] = structpb.NewStructValue(labels)
	return out
}

// DesiredFromObserved keeps what is composed of an object: its type, name,
// namespace, labels and spec.
func DesiredFromObserved(s *structpb.Struct) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, k := range []string{"apiVersion", "kind", "spec"} {
		if v, ok := s.GetFields()[k]; ok {
			out.Fields[k] = v
		}
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, k := range []string{"name", "namespace", "labels"} {
		if v, ok := s.GetFields()["metadata"].GetStructValue().GetFields()[k]; ok {
			md.Fields[k] = v
		}
	}
	out.Fields["metadata"] = structpb.NewStructValue(md)
	return out
}
