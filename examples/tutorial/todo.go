package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/serialization"
)

// EntityType is the to-do lists' entity type: a list's persistence id is
// "TodoList|<list>".
const EntityType = "TodoList"

// Tags stored with the events, for queries and projections by tag.
const (
	TagTodo = "todo"      // every event of every list
	TagDone = "todo-done" // the completions
)

// Event is an event of a to-do list.
type Event interface{ isEvent() }

// ItemAdded records a new item; its ID is its position in the list.
type ItemAdded struct {
	ID    int    `json:"id"`
	Title string `json:"title"`
}

// ItemCompleted records that an open item is done.
type ItemCompleted struct {
	ID int `json:"id"`
}

func (ItemAdded) isEvent()     {}
func (ItemCompleted) isEvent() {}

// Item is one item of a list.
type Item struct {
	ID    int    `json:"id"`
	Title string `json:"title"`
	Done  bool   `json:"done"`
}

// List is a list's state, the events applied in order.
type List struct {
	Items []Item `json:"items"`
}

// Register adds the events and the state (for snapshots) to a registry,
// each under a manifest of its own: the name stored with every payload.
func Register(reg *serialization.Registry) error {
	return errors.Join(
		serialization.RegisterJSON[ItemAdded](reg, "todo.ItemAdded"),
		serialization.RegisterJSON[ItemCompleted](reg, "todo.ItemCompleted"),
		serialization.RegisterJSON[List](reg, "todo.List"),
	)
}

// Command is a command to a to-do list.
type Command interface{ isCommand() }

// AddItem adds an item and replies with the list.
type AddItem struct {
	Title string
	Reply entity.ReplyTo[List]
}

// CompleteItem marks the open item ID done and replies with the list.
type CompleteItem struct {
	ID    int
	Reply entity.ReplyTo[List]
}

// GetList replies with the list.
type GetList struct {
	Reply entity.ReplyTo[List]
}

func (AddItem) isCommand()      {}
func (CompleteItem) isCommand() {}
func (GetList) isCommand()      {}

// Behavior is the to-do list entity.
func Behavior() entity.Behavior[Command, Event, List] {
	var fx entity.Effects[Event, List]
	return entity.Behavior[Command, Event, List]{
		EntityType: EntityType,
		Command: func(l List, c Command) entity.ReplyEffect[Event, List] {
			switch c := c.(type) {
			case AddItem:
				if c.Title == "" {
					return fx.Reply(func(List) { c.Reply.Fail(errors.New("todo: an item needs a title")) })
				}
				added := ItemAdded{ID: len(l.Items) + 1, Title: c.Title}
				return fx.Persist(added).ThenReply(func(l List) { c.Reply.Send(l) })
			case CompleteItem:
				if c.ID < 1 || c.ID > len(l.Items) || l.Items[c.ID-1].Done {
					return fx.Reply(func(List) { c.Reply.Fail(fmt.Errorf("todo: no open item %d", c.ID)) })
				}
				return fx.Persist(ItemCompleted{ID: c.ID}).ThenReply(func(l List) { c.Reply.Send(l) })
			case GetList:
				return fx.Reply(func(l List) { c.Reply.Send(l) })
			}
			return fx.Unhandled()
		},
		Event: func(l List, e Event) List {
			items := slices.Clone(l.Items) // never change the state in place
			switch e := e.(type) {
			case ItemAdded:
				items = append(items, Item{ID: e.ID, Title: e.Title})
			case ItemCompleted:
				items[e.ID-1].Done = true
			}
			return List{Items: items}
		},
		Tagger: func(e Event) []string {
			if _, ok := e.(ItemCompleted); ok {
				return []string{TagTodo, TagDone}
			}
			return []string{TagTodo}
		},
		Snapshots: entity.SnapshotPolicy[Event, List]{Every: 100},
	}
}
