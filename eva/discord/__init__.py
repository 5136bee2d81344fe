# Eva in Discord: the gateway bot (hikari under trio-asyncio), its pure payload mapping,
# and the slash commands. `mapping` is pure; `bot` is the shell that runs hikari.
