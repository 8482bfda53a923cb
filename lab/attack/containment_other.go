//go:build !linux

package attack

import "context"

// The containment attempts need Linux.

var (
	ctlScratch           = notLinux
	ctlHome              = notLinux
	ctlRW                = notLinux
	fsReadPolicy         = notLinux
	fsReadPolicyReplaced = notLinux
	fsWritableExecMount  = notLinux
	fsReadAuditLog       = notLinux
	fsReadAuditKey       = notLinux
	fsDeleteAuditLog     = notLinux
	fsTruncateAuditLog   = notLinux
	fsReplaceAuditLog    = notLinux
	fsReadHomeKey        = notLinux
	fsWriteHome          = notLinux
	fsWriteWork          = notLinux
	fsWriteEtc           = notLinux
	fsMmapExec           = notLinux
	fsLdPreload          = notLinux
	auditFill            = notLinux
	fsWriteSysctl        = notLinux
	fsSetID              = notLinux
	fsOtherTerminals     = notLinux
	fsHoldStartSlots     = notLinux
	fsReadInit           = notLinux
	resPinScratchMemory  = notLinux
	resTakeInotifyQuota  = notLinux
	ttyOutliveWorker     = notLinux
	viewHostileStrings   = notLinux
	viewExecSuggestTree  = notLinux
)

func fsExec(id string, dir func(*attacker) (string, error)) func(context.Context, *attacker) result {
	return notLinux
}
