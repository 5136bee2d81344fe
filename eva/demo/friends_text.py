# The words of the synthetic friends' chat: scripted scenes, templates and fillers.
#
# Plain data for eva.demo.friends; no logic. Invariants: every `{word}` in a
# template names a key of WORDS (or `name`, another friend's name); the words
# "durian" and "cheesecake" (the demo's recall query) appear only in SCENES;
# a scene line is (author key, text, *attachment file names) and a text that
# starts with "^" replies to the scene's previous line.
from __future__ import annotations

Scene = tuple[str, tuple[tuple[str, ...], ...]]

SCENES: tuple[Scene, ...] = (
    ("01-03", (
        ("priya", "New year, new project: we finally make our own board game. Code name "
         "Project Marmalade, because it's sticky and everyone likes it."),
        ("dev", "^I'm in. I can do the card layouts, I have InDesign from work"),
        ("kenji", "Marmalade is a great code name. What is the game about?"),
        ("priya", "^Foxes running a night market. You trade jars, bluff about what's inside."),
        ("zoe", "foxes!! yes. I'll draw the foxes"),
    )),
    ("01-19", (
        ("priya", "Marmalade vote results: 2 to 5 players, about 45 minutes, 54 cards plus 12 "
         "jar tokens. Dev's idea of a hidden-jar bluff round won 4 to 1."),
        ("jonas", "^the 1 was me and I stand by it"),
        ("dev", "first card templates are in the shared folder", "marmalade_cards_v1.png"),
    )),
    ("02-08", (
        ("zoe", "Serious proposal: Lofoten in June. Midnight sun, the Reinebringen hike, "
         "fish soup, no phones. June 14 to 21?"),
        ("maya", "^YES. I have been wanting to see Lofoten since forever"),
        ("jonas", "I priced it roughly: about 640 euros each with flights, cabin and a car"),
        ("kenji", "I can do June 14 to 21 if I fly from Osaka via Oslo"),
        ("priya", "count me in, I'll start a packing list"),
    )),
    ("03-02", (
        ("jonas", "Booked! A red rorbu cabin in Reine, 6 beds, 2,940 NOK a night, deposit paid. "
         "Ferry Bodø to Moskenes on June 14 at 15:30."),
        ("zoe", "^Jonas booking something on time?? who are you", "reaction.gif"),
        ("dev", "I'll rent the car in Bodø, a 7-seater, pickup June 14 at noon"),
    )),
    ("03-22", (
        ("kenji", "For Saturday's game night I am bringing back the durian cheesecake. "
         "Improved recipe. Less smell."),
        ("maya", "^absolutely not. The durian cheesecake of 2024 still haunts my fridge"),
        ("jonas", "I will play Marmalade with a clothes peg on my nose"),
        ("kenji", "You will all apologise", "durian_cheesecake_v2.jpg"),
    )),
    ("04-12", (
        ("priya", "Marmalade playtest #1 notes, long, sorry. Setup took 11 minutes, too long; "
         "we cut the market board from 9 stalls to 6. The bluff round works: people lied "
         "happily and the table was loud. Jar tokens are too small, Dev will make them 30 mm. "
         "Scoring: honey jars 3 points, plum jars 2, empty jars minus 1, and a set of three "
         "different fruits gives a bonus of 5. Jonas found a loop where you can hoard empty "
         "jars and block everyone, so empty jars now cost 1 coin a round to keep. Games took "
         "52, 47 and 44 minutes. Next playtest in two weeks with the new tokens; Zoë brings "
         "fox art for at least 8 cards."),
        ("dev", "^30 mm tokens, noted. I'll also try a darker orange for the marmalade jars"),
        ("zoe", "fox sketches so far", "fox_sketches_1.jpg", "fox_sketches_2.jpg"),
    )),
    ("05-03", (
        ("priya", "Marmalade decisions from last night: price 24 euros, print run 300 copies, "
         "the printer quoted 1,870 euros. Deadline October 15 so we have boxes for the fair "
         "in Essen."),
        ("jonas", "^I can front 600 of the printer money, pay me back in jars"),
        ("maya", "I'll do the rulebook editing, 8 pages max"),
    )),
    ("06-10", (
        ("priya", "Lofoten packing list, final: rain jacket (it WILL rain), warm layer, hiking "
         "boots broken in, sleep mask for the midnight sun, swimsuit for the brave, snacks for "
         "the ferry, a power bank, cash in NOK for the fish shop in Reine, the Marmalade "
         "prototype for the rainy evenings, sunscreen (yes really), one nice outfit for the "
         "dinner in Hamnøy, and earplugs because Jonas snores. Kenji brings the good coffee. "
         "Dev has the car keys from noon on June 14. Ferry leaves Bodø at 15:30, be at the "
         "terminal by 14:45 or we leave you there."),
        ("jonas", "^I do not snore. I breathe with conviction"),
    )),
    ("06-14", (
        ("dev", "Car picked up, the 7-seater is enormous", "IMG_6141.jpg"),
        ("zoe", "on the ferry!! Bodø is behind us", "IMG_6144.jpg", "IMG_6145.jpg"),
        ("kenji", "^the light at 11 pm is unreal"),
        ("maya", "rorbu is even redder than the photos", "PXL_20250614_2251.jpg"),
    )),
    ("06-16", (
        ("jonas", "Reinebringen done. 1,978 steps. My legs have left the group chat"),
        ("priya", "^view from the top", "reinebringen_top.jpg"),
        ("zoe", "fish soup in Reine tonight, the one with the saffron"),
    )),
    ("06-18", (
        ("maya", "storm day: rain sideways, we are playing Marmalade in the cabin"),
        ("kenji", "^the bluff round is even better when you are trapped together"),
        ("dev", "new house rule from the cabin: whoever opens an empty jar makes the tea"),
    )),
    ("06-23", (
        ("maya", "Lofoten recap for future us: we did Reinebringen (1,978 steps, Jonas "
         "complained for 1,970 of them), kayaked around Hamnøy, ate fish soup with saffron "
         "three nights out of seven, and played Marmalade during the storm on the 18th until "
         "2 am. Best moment: the whale tail on the ferry back. Worst moment: Dev reversing "
         "the 7-seater into a fish drying rack (the fisherman was very nice about it). Cost "
         "came out at 612 euros each, under Jonas's estimate. Photos are in the shared album. "
         "Same time next year? I vote the Faroe Islands."),
        ("dev", "^the fish rack was fine!! it moved first"),
        ("zoe", "Faroe Islands seconded"),
    )),
    ("07-20", (
        ("maya", "Jonas turns 30 on August 9. Plan: dinner at Café Lindholm at 19:00, then "
         "karaoke. Gift: a vintage film camera, 35 euros each."),
        ("priya", "^I found a Pentax in great shape for 190 at the flea market"),
        ("dev", "perfect, I'll handle the cake. Normal cake. No surprises."),
    )),
    ("08-09", (
        ("zoe", "HAPPY 30th JONAS 🎉", "party_lindholm.jpg"),
        ("kenji", "surprise: I brought a mini durian cheesecake as well. For balance."),
        ("jonas", "^best birthday ever, even the durian cheesecake. Thank you all, the Pentax "
         "is perfect"),
    )),
    ("09-14", (
        ("dev", "Marmalade printer proof arrived!", "marmalade_proof_v3.jpg"),
        ("priya", "^colours look great. Decision: paper went up, so the print run is 250 "
         "copies instead of 300, price stays 24 euros"),
        ("maya", "rulebook final: 8 pages, 2 examples, 1 fox joke"),
    )),
    ("10-16", (
        ("priya", "Essen day one: we sold 112 copies of Marmalade!! A shop from Lyon wants 40 "
         "more"),
        ("zoe", "^I'M CRYING. the foxes are famous"),
        ("jonas", "paid back the 600 in actual jars, as agreed", "jars.jpg"),
    )),
    ("11-30", (
        ("biscuit", "📊 Poll closed: Secret Santa budget is 20 euros. Draw on December 5. Banned "
         "gifts: the durian cheesecake."),
        ("kenji", "^this bot has been turned against me"),
    )),
    ("12-31", (
        ("dev", "Year recap before the fireworks: Project Marmalade went from a silly code name "
         "in January to 250 printed copies and 112 sold on the first day in Essen. Lofoten "
         "happened and nobody fell off Reinebringen. Jonas turned 30 and got the Pentax. Gerald "
         "the sourdough starter survived a whole year and two holidays with the neighbours. "
         "Kenji made the durian cheesecake twice and we are, somehow, still friends. Next "
         "year: Faroe Islands, Marmalade second edition, and maybe learning to cook something "
         "that is not shakshuka. Love you all, happy new year."),
        ("maya", "^happy new year!! 🎆"),
        ("zoe", "🥂🥂🥂"),
    )),
)

WORDS: dict[str, tuple[str, ...]] = {
    "food": (
        "ramen", "shakshuka", "lentil soup", "pierogi", "pad see ew", "leftover curry",
        "tacos", "bibimbap", "mushroom risotto", "pho", "falafel wraps", "a giant bowl of pasta",
        "okonomiyaki", "dal and rice", "fish soup", "halloumi burgers", "cold noodles",
        "jollof rice", "borscht", "dumplings", "a frozen pizza of shame", "banana bread",
    ),
    "place": (
        "the bakery on Ferry Street", "the climbing gym", "the farmers market", "the library",
        "the park by the canal", "the Korean place near the station", "the flea market",
        "the little cinema", "Café Lindholm", "the night market", "the pool", "the laundrette",
    ),
    "activity": (
        "went for a run", "fixed my bike chain", "repainted the hallway", "did my taxes",
        "cleaned the fridge", "walked the neighbour's dog", "assembled a bookshelf",
        "answered 40 emails", "reorganised the spice drawer", "finished a 1000-piece jigsaw",
        "tried yoga", "baked bread", "replaced a light switch", "watered the balcony tomatoes",
        "ironed everything I own", "fed Gerald",
    ),
    "feeling": (
        "tired", "weirdly productive", "sleepy", "very caffeinated", "hungry", "smug",
        "a bit sad", "chaotic", "calm for once", "overfed", "proud", "confused",
    ),
    "weather": (
        "raining sideways", "snowing", "sunny for once", "foggy", "freezing", "humid", "windy",
        "grey and drizzly", "31 degrees", "hailing", "weirdly warm",
    ),
    "show": (
        "the Danish detective show", "the baking competition", "the octopus documentary",
        "the new season of the space show", "the cooking show with the angry chef",
        "the murder mystery podcast", "the quiz show", "the anime Kenji recommended",
    ),
    "item": (
        "umbrella", "charger", "frying pan", "copy of Dune", "card sleeves", "bike pump",
        "blue hoodie", "tent pegs", "headphones", "tupperware", "drill",
    ),
    "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "time": ("7", "7:30", "8", "8:30", "6", "9", "noon", "after lunch"),
    "work": (
        "the printer is on fire again", "three meetings about meetings", "the deploy went fine",
        "I got a new desk chair", "the client changed everything again", "cake at lunch",
        "the wifi died twice", "I fixed a bug from 2019", "fire drill in the rain",
        "my laptop updated itself mid-call",
    ),
    "plan": (
        "bouldering", "a movie night", "pub quiz", "a picnic", "board games", "a long walk",
        "karaoke", "the flea market", "a dumpling night", "a Marmalade playtest",
    ),
    "reaction": (
        "lol", "haha", "omg", "same", "wait what", "no way", "😂", "nice", "agreed",
        "big if true", "classic", "💀", "yes!!", "true", "ok that's amazing", "noooo",
    ),
    "adj": ("long", "endless", "chaotic", "fine", "surprisingly nice", "brutal", "slow", "weird"),
    "game": ("Catan", "Codenames", "Wingspan", "chess", "Mario Kart", "Azul", "Dixit"),
    "gerald": (
        "bubbling like a volcano", "sulking", "very sour today", "twice his size",
        "living his best life", "smelling like bananas", "on a diet", "thriving",
    ),
    "service": ("plumber", "dentist", "bike shop", "barber", "vet", "tailor", "locksmith"),
    "thing": ("laptop", "kettle", "washing machine", "phone screen", "umbrella", "bike light"),
    "excuse": (
        "I have a dentist appointment", "family dinner", "I'm working late",
        "my cousin is visiting", "I'm saving money", "I'm too tired", "laundry emergency",
    ),
    "link": (
        "https://en.wikipedia.org/wiki/Midnight_sun", "https://en.wikipedia.org/wiki/Sourdough",
        "https://en.wikipedia.org/wiki/Canada_goose", "https://en.wikipedia.org/wiki/Lofoten",
        "https://en.wikipedia.org/wiki/Red_fox", "https://www.youtube.com/watch?v=q7Fz2LmW0aE",
        "https://www.youtube.com/watch?v=Hk3pX9tQe1s", "https://www.openstreetmap.org/#map=12/67.93/13.09",
        "https://boardgamegeek.com/boardgame/266192/wingspan", "https://www.yr.no/en",
    ),
    "edit": (" (edit: typo)", " *edit: wrong day, I meant the weekend", " (edited)", ""),
}

CHAT_TEMPLATES: tuple[str, ...] = (
    "just {activity}, feeling {feeling}",
    "anyone up for {food} tonight?",
    "it's {weather} here again",
    "it's {weather} and I'm {feeling} about it",
    "did anyone watch {show}? no spoilers please",
    "finished {show} last night. {reaction}",
    "I'm at {place}, want anything?",
    "{name}, do you still have my {item}?",
    "who's in for {plan} on {weekday}?",
    "{plan} on {weekday}? I can do from {time}",
    "work is {adj} today: {work}",
    "update: {work}",
    "making {food} for dinner, come over if you want",
    "had {food} at {place}, would recommend",
    "Gerald update: he is {gerald}",
    "Gerald is {gerald} and I am {feeling}",
    "{name} where are you, we're at {place}",
    "{name} is on Jonas time again",
    "game night {weekday}? I'll bring {game}",
    "I lost at {game} again, I demand a rematch",
    "remember the goose incident? I saw that goose again at {place}",
    "good morning ☀️",
    "night all",
    "{reaction}",
    "{reaction}",
    "{reaction} {name}",
    "I {activity} and now I'm {feeling}",
    "can someone remind me why I agreed to {plan}",
    "does anyone know a good {service}?",
    "my {thing} broke again",
    "{name} you would love {show}",
    "back from {place}, it was {adj}",
    "ok who ate the last of the {food}",
    "how is everyone's {weekday} going?",
)

REPLY_TEMPLATES: tuple[str, ...] = (
    "{reaction}",
    "yes, {weekday} works for me",
    "can't, {excuse}",
    "count me in",
    "same here honestly",
    "haha {name} classic",
    "wait really?",
    "where was that?",
    "send pics",
    "I'm in if there's {food}",
    "no way {name}, {reaction}",
    "{name} I told you so",
    "ok but the goose incident was worse",
)

PHOTO_TEMPLATES: tuple[str, ...] = (
    "look",
    "",
    "today's view",
    "Gerald update",
    "{food} was a success",
    "{name} this is for you",
    "found at {place}",
    "it's {weather}, evidence attached",
)

LINK_TEMPLATES: tuple[str, ...] = (
    "look at this {link}",
    "this is so us {link}",
    "{link} thoughts?",
    "{name} you asked about this: {link}",
    "reading {link} instead of working",
)

BOT_TEMPLATES: tuple[str, ...] = (
    "🔔 Weekly reminder: bins go out on Tuesday. Game night poll is open, react for {weekday}.",
    "🔔 Weekly reminder: water the balcony tomatoes. This week's game pick: {game}.",
    "📊 Last week's poll: {plan} won. Organiser, please post a time.",
    "🔔 Weekly reminder: whoever has the {item}, please give it back.",
)

RAMBLE_SENTENCES: tuple[str, ...] = (
    "Okay so this week has been a lot and I need to write it all down somewhere.",
    "Monday I {activity} and by the evening I was {feeling}.",
    "Then {work}, which nobody saw coming except {name}.",
    "I tried making {food} from a recipe that said twenty minutes and it took two hours.",
    "The weather has been {weather} the whole time, so the laundry is still damp.",
    "{name}, I know you said {show} gets better in episode four, I am still waiting.",
    "Also Gerald is {gerald}, which I choose to read as a good sign.",
    "I went to {place} to clear my head and ran into the goose again, it remembered me.",
    "Anyway, is anyone free on {weekday} for {plan}? I will bring snacks.",
    "My {thing} broke in the middle of all of this, so if I go quiet that's why.",
    "I keep thinking about the Lofoten trip and how loud the seagulls were at 3 am.",
    "Marmalade-wise I think the plum jars are still a bit too strong, we should test it.",
    "In other news I have decided to become a person who owns a label maker.",
    "Thanks for listening, you are all better than therapy and much cheaper.",
)
