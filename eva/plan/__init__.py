# The cost planner: what a server-month costs at list prices, played from a channel's real
# timing (`eva plan`). Pure, like the core it imports; nothing in the core imports it.
