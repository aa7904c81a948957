// Package profile is an example durable-state entity: a user profile
// whose whole state is stored, revision after revision (Akka's
// DurableStateBehavior), instead of the events that changed it.
package profile

import (
	"errors"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/serialization"
)

// EntityType is the profiles' entity type.
const EntityType = "Profile"

// Tag is stored with every revision.
const Tag = "profiles"

// Profile is the state.
type Profile struct {
	Name    string `json:"name"`
	Email   string `json:"email"`
	Updates int    `json:"updates"`
}

// Commands.
type (
	// Command is a profile command.
	Command interface{ isCommand() }
	// Update sets the name and email.
	Update struct {
		Name, Email string
		Reply       entity.ReplyTo[Profile]
	}
	// Erase deletes the profile (the next Update starts a new one).
	Erase struct{ Reply entity.ReplyTo[Profile] }
	// Get replies with the profile.
	Get struct{ Reply entity.ReplyTo[Profile] }
)

func (Update) isCommand() {}
func (Erase) isCommand()  {}
func (Get) isCommand()    {}

// ErrNoName is the reply to an Update without a name.
var ErrNoName = errors.New("profile: a name is required")

// Register registers the state in r.
func Register(r *serialization.Registry) error {
	return serialization.RegisterJSON[Profile](r, "profile.Profile")
}

var fx entity.DurableEffects[Profile]

// Behavior returns the profile behavior.
func Behavior() entity.DurableBehavior[Command, Profile] {
	return entity.DurableBehavior[Command, Profile]{
		EntityType: EntityType,
		Tag:        Tag,
		Command: func(p Profile, c Command) entity.ReplyEffect[entity.StateChange[Profile], Profile] {
			switch c := c.(type) {
			case Update:
				if c.Name == "" {
					return fx.Reply(func(Profile) { c.Reply.Fail(ErrNoName) })
				}
				return fx.PersistState(Profile{Name: c.Name, Email: c.Email, Updates: p.Updates + 1}).
					ThenReply(func(p Profile) { c.Reply.Send(p) })
			case Erase:
				return fx.Delete().ThenReply(func(p Profile) { c.Reply.Send(p) })
			case Get:
				return fx.Reply(func(p Profile) { c.Reply.Send(p) })
			}
			return fx.Unhandled()
		},
	}
}
