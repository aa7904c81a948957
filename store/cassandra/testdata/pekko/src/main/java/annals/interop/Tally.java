package annals.interop;

import java.util.Set;

import org.apache.pekko.Done;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.persistence.typed.PersistenceId;
import org.apache.pekko.persistence.typed.javadsl.CommandHandler;
import org.apache.pekko.persistence.typed.javadsl.EventHandler;
import org.apache.pekko.persistence.typed.javadsl.EventSourcedBehavior;

/**
 * The benchmark's entity: the events of Cart (Added), a state that only counts them, so that a
 * recovery's cost is the journal's and not the state's. Every event gets the same tags.
 */
public final class Tally extends EventSourcedBehavior<Tally.Command, Added, Long> {

  public interface Command {}

  /** Persists Added(item) and replies once it is written. */
  public record Add(String item, ActorRef<Done> replyTo) implements Command {}

  /** Replies the number of events; stashed until recovery is over. */
  public record Get(ActorRef<Long> replyTo) implements Command {}

  /** Replies and stops (the benchmark recovers the same id again in a new actor). */
  public record Stop(ActorRef<Done> replyTo) implements Command {}

  private final Set<String> tags;

  /** pid is the persistence id exactly as stored, e.g. "Tally|t1". */
  public Tally(String pid, Set<String> tags) {
    super(PersistenceId.ofUniqueId(pid));
    this.tags = tags;
  }

  @Override
  public Long emptyState() {
    return 0L;
  }

  @Override
  public CommandHandler<Command, Added, Long> commandHandler() {
    return newCommandHandlerBuilder()
        .forAnyState()
        .onCommand(Add.class, (state, c) ->
            Effect().persist(new Added(c.item())).thenReply(c.replyTo(), s -> Done.getInstance()))
        .onCommand(Get.class, (state, c) -> Effect().reply(c.replyTo(), state))
        .onCommand(Stop.class, (state, c) -> Effect().stop().thenReply(c.replyTo(), s -> Done.getInstance()))
        .build();
  }

  @Override
  public EventHandler<Long, Added> eventHandler() {
    return newEventHandlerBuilder().forAnyState().onEvent(Added.class, (state, e) -> state + 1).build();
  }

  @Override
  public Set<String> tagsFor(Added event) {
    return tags;
  }
}
