package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version name the API; Resource names of the two kinds follow.
const (
	Group         = "external-ip.io"
	Version       = "v1alpha1"
	PoolResource  = "externalippools"
	ClaimResource = "externalipclaims"
	PoolKind      = "ExternalIPPool"
	ClaimKind     = "ExternalIPClaim"
	PoolListKind  = "ExternalIPPoolList"
	ClaimListKind = "ExternalIPClaimList"
)

// SchemeGroupVersion is the group and version of every type here.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Pools and Claims are the resources, for clients and informers.
var (
	Pools  = SchemeGroupVersion.WithResource(PoolResource)
	Claims = SchemeGroupVersion.WithResource(ClaimResource)
)

// AddToScheme registers the types with a scheme, for clients and for
// client-go's fake object tracker.
var AddToScheme = schemeBuilder.AddToScheme

var schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion,
		&ExternalIPPool{}, &ExternalIPPoolList{},
		&ExternalIPClaim{}, &ExternalIPClaimList{},
	)
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
