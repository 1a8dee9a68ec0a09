"""Numbers from stored runs: run views, config differences, matched points, memory
headroom, who is baseline and headline, statistics over trials, attribution, the card.
Never imports run/, load/ or executors/: it reads folders, it does not run anything."""
