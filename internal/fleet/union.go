package fleet

// Union are the items of own, then those of uncounted that own did not
// hold: the replicas of a narrow call (docs/spec.md#narrow-requests), in
// which this deployment's replicas that no report counts come twice. An
// item is known by its namespace and name, or, where they do not read, by
// its bytes.
func Union(own, uncounted Items) Items {
	return &union{own: own, uncounted: uncounted, seen: map[string]bool{}}
}

type union struct {
	own, uncounted Items
	ownDone        bool
	seen           map[string]bool
}

// identity is what tells two copies of one replica from two replicas.
func identity(item []byte) string {
	name, namespace, _ := metadataOf(item)
	if name == "" {
		return "\x00" + string(item)
	}
	return namespace + "/" + name
}

func (u *union) Next() ([]byte, bool, error) {
	if !u.ownDone {
		item, ok, err := u.own.Next()
		if err != nil {
			return nil, false, err
		}
		if ok {
			u.seen[identity(item)] = true
			return item, true, nil
		}
		u.ownDone = true
	}
	for {
		item, ok, err := u.uncounted.Next()
		if err != nil || !ok {
			return item, ok, err
		}
		if !u.seen[identity(item)] {
			return item, true, nil
		}
	}
}
