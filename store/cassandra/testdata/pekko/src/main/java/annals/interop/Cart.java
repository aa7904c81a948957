package annals.interop;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import org.apache.pekko.Done;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.persistence.typed.PersistenceId;
import org.apache.pekko.persistence.typed.javadsl.CommandHandler;
import org.apache.pekko.persistence.typed.javadsl.EventHandler;
import org.apache.pekko.persistence.typed.javadsl.EventSourcedBehavior;

/** A cart whose state is the list of items added, in order. Every event gets the same tags. */
public final class Cart extends EventSourcedBehavior<Cart.Command, Added, List<String>> {

  public interface Command {}

  /** Persists Added(item) and replies once it is written. */
  public record Add(String item, ActorRef<Done> replyTo) implements Command {}

  /** Replies the items; stashed until recovery is over, so the first reply is the recovered state. */
  public record Get(ActorRef<List<String>> replyTo) implements Command {}

  private final Set<String> tags;

  /** pid is the persistence id exactly as stored, e.g. "Cart|c1". */
  public Cart(String pid, Set<String> tags) {
    super(PersistenceId.ofUniqueId(pid));
    this.tags = tags;
  }

  @Override
  public List<String> emptyState() {
    return List.of();
  }

  @Override
  public CommandHandler<Command, Added, List<String>> commandHandler() {
    return newCommandHandlerBuilder()
        .forAnyState()
        .onCommand(Add.class, (state, c) ->
            Effect().persist(new Added(c.item())).thenReply(c.replyTo(), s -> Done.getInstance()))
        .onCommand(Get.class, (state, c) -> Effect().reply(c.replyTo(), state))
        .build();
  }

  @Override
  public EventHandler<List<String>, Added> eventHandler() {
    return newEventHandlerBuilder()
        .forAnyState()
        .onEvent(Added.class, (state, e) -> {
          List<String> next = new ArrayList<>(state);
          next.add(e.item());
          return List.copyOf(next);
        })
        .build();
  }

  @Override
  public Set<String> tagsFor(Added event) {
    return tags;
  }
}
