#!/usr/bin/env python3
"""Writes calibration/default.jsonl, decide's built-in startup-calibration question set.

Every item below was written for this project (no external data set). Each line is
{"id", "group", "state", "question" (a /v1/systemone question), "expected"}; questions about one
state share a group, so cross-validation keeps them in one fold. Expected answers are meant to be
unambiguous to a careful human reader. Run: python3 scripts/make-calibration-set.py
"""
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "calibration" / "default.jsonl"
lines = []


def add(group, state, question, expected):
    lines.append({"id": f"{group}-{sum(1 for l in lines if l['group'] == group) + 1}", "group": group,
                  "state": state, "question": question, "expected": expected})


def noul(instructions):
    return {"type": "noul", "instructions": instructions}


def choice(instructions, labels):
    return {"type": "choice", "instructions": instructions, "criteria": {l: None for l in labels}}


def score(instructions, levels):
    return {"type": "score", "instructions": instructions, "criteria": levels}


# --- Support tickets: team, refund request, urgency ------------------------------------------
TEAMS = ["billing", "shipping", "technical", "account"]
URGENCY = ["low", "medium", "high"]
tickets = [
    ("I was charged twice for my subscription this month. Please refund the duplicate charge.", "billing", True, 1),
    ("My package was supposed to arrive on Monday and the tracking page has not updated in a week.", "shipping", False, 1),
    ("The app crashes every time I open the settings page on my phone.", "technical", False, 1),
    ("I forgot my password and the reset email never arrives. I cannot log in at all.", "account", False, 1),
    ("Our whole team is locked out of the production dashboard and customers are affected right now. Please help immediately!", "technical", False, 2),
    ("Could you tell me when the invoice for March will be available? No rush.", "billing", False, 0),
    ("The box arrived crushed and the glass vase inside is broken. I want my money back.", "shipping", True, 1),
    ("I would like to change the email address on my profile.", "account", False, 0),
    ("Your website shows error 500 when I click checkout.", "technical", False, 1),
    ("You billed my card after I cancelled. Refund it now or I will dispute the charge with my bank today.", "billing", True, 2),
    ("Is it possible to ship to Norway? Just asking for later this year.", "shipping", False, 0),
    ("Please delete my account and all data associated with it.", "account", False, 0),
    ("The export button produces an empty CSV file, every time, since the last update.", "technical", False, 1),
    ("The courier left my parcel at the wrong address and the neighbour says they never got it.", "shipping", False, 1),
    ("I was charged the annual price but I selected the monthly plan. Please refund the difference.", "billing", True, 1),
    ("Someone logged into my account from another country and changed my password! Lock it now!", "account", False, 2),
]
for n, (text, team, refund, urgency) in enumerate(tickets):
    g = f"ticket{n + 1:02d}"
    add(g, text, choice("Which team should handle this ticket?", TEAMS), team)
    add(g, text, noul("The customer asks for money back."), refund)
    add(g, text, score("How urgent is this ticket?", URGENCY), urgency)

# --- Product reviews: sentiment and star rating ------------------------------------------------
SENT = ["negative", "neutral", "positive"]
reviews = [
    ("Absolutely love these headphones. The sound is rich and the battery lasts for days.", "positive", True),
    ("The blender broke after two uses. Complete waste of money.", "negative", False),
    ("It is a chair. It holds me up. Nothing more to say.", "neutral", False),
    ("Terrible customer service and the shoes fell apart within a week.", "negative", False),
    ("Best coffee maker I have ever owned, I recommend it to everyone.", "positive", True),
    ("The book arrived on time. I have not started reading it yet.", "neutral", False),
    ("The hotel room was dirty, noisy and smelled of smoke. Never again.", "negative", False),
    ("Fantastic little restaurant: friendly staff, delicious pasta, fair prices.", "positive", True),
    ("The jacket is warm and fits perfectly. Very happy with this purchase.", "positive", True),
    ("The charger stopped working after three days and the seller ignores my messages.", "negative", False),
    ("The package contained the cable described on the page.", "neutral", False),
    ("Wonderful concert, the band played for three hours and the crowd was amazing.", "positive", True),
]
for n, (text, sentiment, recommend) in enumerate(reviews):
    g = f"review{n + 1:02d}"
    add(g, text, choice("What is the sentiment of this review?", SENT), sentiment)
    add(g, text, noul("The reviewer is happy with what they describe."), recommend)

# --- Topic classification ----------------------------------------------------------------------
TOPICS = ["sports", "politics", "technology", "food", "weather"]
topics = [
    ("The striker scored twice in the second half and the home team won the cup final.", "sports"),
    ("Parliament passed the new budget after a long debate between the two largest parties.", "politics"),
    ("The new phone has a faster processor and a larger battery than last year's model.", "technology"),
    ("Slowly fry the onions in butter, then add the rice and stir until it turns translucent.", "food"),
    ("Heavy rain and strong winds are expected along the coast tomorrow afternoon.", "weather"),
    ("The tennis champion lost in the first round of the tournament for the first time in years.", "sports"),
    ("The senator announced she will run for governor next year.", "politics"),
    ("The software update fixes a security flaw in the operating system's network driver.", "technology"),
    ("This bakery makes the best sourdough bread in town, with a thick crunchy crust.", "food"),
    ("A heatwave will push temperatures above 35 degrees for the rest of the week.", "weather"),
    ("The marathon runner finished the race in just over two hours.", "sports"),
    ("Voters will elect a new mayor in the city election on Sunday.", "politics"),
    ("Engineers released an open-source database that stores data on many servers.", "technology"),
    ("Add two eggs, flour and sugar to the bowl and whisk until the batter is smooth.", "food"),
    ("Snow is falling across the mountains and the roads are covered in ice.", "weather"),
]
for n, (text, topic) in enumerate(topics):
    g = f"topic{n + 1:02d}"
    add(g, text, choice("What is the main topic of the text?", TOPICS), topic)
    add(g, text, noul("The text is about sports."), topic == "sports")

# --- Language detection ------------------------------------------------------------------------
LANGS = ["English", "French", "German", "Spanish"]
langs = [
    ("Where is the train station, please?", "English"),
    ("Où est la gare, s'il vous plaît ?", "French"),
    ("Wo ist der Bahnhof, bitte?", "German"),
    ("¿Dónde está la estación de tren, por favor?", "Spanish"),
    ("I would like a cup of tea with milk.", "English"),
    ("Je voudrais une tasse de thé avec du lait.", "French"),
    ("Ich möchte eine Tasse Tee mit Milch.", "German"),
    ("Quisiera una taza de té con leche.", "Spanish"),
    ("The children are playing in the garden.", "English"),
    ("Les enfants jouent dans le jardin.", "French"),
    ("Die Kinder spielen im Garten.", "German"),
    ("Los niños juegan en el jardín.", "Spanish"),
]
for n, (text, lang) in enumerate(langs):
    g = f"lang{n + 1:02d}"
    add(g, text, choice("In which language is the input written?", LANGS), lang)
    add(g, text, noul("The input is written in English."), lang == "English")

# --- Arithmetic facts --------------------------------------------------------------------------
sums = [(2, 3, 5), (7, 5, 12), (9, 9, 18), (10, 15, 25), (6, 7, 13), (12, 8, 20), (4, 4, 8), (11, 3, 14)]
for n, (a, b, c) in enumerate(sums):
    g = f"sum{n + 1:02d}"
    wrong = c + (1 if n % 2 else -1)
    add(g, f"{a} + {b} = {c}", noul("The equation in the input is correct."), True)
    add(g + "w", f"{a} + {b} = {wrong}", noul("The equation in the input is correct."), False)
products = [(3, 4, 12), (5, 6, 30), (7, 8, 56), (2, 9, 18), (6, 6, 36), (4, 5, 20)]
for n, (a, b, c) in enumerate(products):
    g = f"mul{n + 1:02d}"
    options = sorted({c, c + a, c - b, c + 1})
    add(g, f"What is {a} times {b}?", choice("Which number is the correct answer to the question?", [str(o) for o in options]), str(c))
compare = [(17, 71), (250, 205), (9, 90), (1000, 999), (42, 24), (3, 33)]
for n, (a, b) in enumerate(compare):
    g = f"cmp{n + 1:02d}"
    add(g, f"First number: {a}. Second number: {b}.", noul("The first number is larger than the second number."), a > b)
even = [4, 7, 10, 13, 22, 35, 100, 81]
for n, x in enumerate(even):
    add(f"even{n + 1:02d}", f"The number is {x}.", noul("The number in the input is even."), x % 2 == 0)

# --- Code -------------------------------------------------------------------------------------
CODE_LANGS = ["Python", "JavaScript", "SQL", "Rust"]
code = [
    ("def greet(name):\n    return f\"Hello, {name}\"", "Python", False),
    ("SELECT name, email FROM users WHERE active = 1;", "SQL", False),
    ("fn main() {\n    println!(\"hello\");\n}", "Rust", False),
    ("const total = items.reduce((sum, x) => sum + x, 0);\nconsole.log(total);", "JavaScript", False),
    ("for i in range(10):\n    print(i)", "Python", True),
    ("let mut v = Vec::new();\nfor i in 0..10 {\n    v.push(i);\n}", "Rust", True),
    ("for (let i = 0; i < 10; i++) {\n  console.log(i);\n}", "JavaScript", True),
    ("UPDATE orders SET status = 'shipped' WHERE id = 42;", "SQL", False),
]
for n, (text, lang, loop) in enumerate(code):
    g = f"code{n + 1:02d}"
    add(g, text, choice("In which programming language is this code written?", CODE_LANGS), lang)
    add(g, text, noul("The code contains a loop."), loop)

# --- General knowledge (no medicine) ------------------------------------------------------------
facts = [
    ("Paris is the capital of France.", True),
    ("The sun rises in the west.", False),
    ("Water freezes at 0 degrees Celsius at sea level.", True),
    ("A week has eight days.", False),
    ("Spiders have eight legs.", True),
    ("The Pacific is the largest ocean on Earth.", True),
    ("Penguins live mainly at the North Pole.", False),
    ("There are 60 minutes in an hour.", True),
    ("The moon is larger than the Earth.", False),
    ("Tokyo is a city in Japan.", True),
    ("Ice is heavier than the same volume of liquid water, so it sinks.", False),
    ("A triangle has three sides.", True),
    ("Berlin is the capital of Italy.", False),
    ("Bees make honey.", True),
    ("January has 31 days.", True),
    ("Whales are a kind of fish.", False),
]
for n, (text, truth) in enumerate(facts):
    add(f"fact{n + 1:02d}", text, noul("The statement in the input is true."), truth)
capitals = [
    ("Which city is the capital of Spain?", ["Madrid", "Lisbon", "Rome"], "Madrid"),
    ("Which city is the capital of Japan?", ["Seoul", "Tokyo", "Beijing"], "Tokyo"),
    ("Which city is the capital of Canada?", ["Toronto", "Vancouver", "Ottawa"], "Ottawa"),
    ("Which city is the capital of Germany?", ["Berlin", "Munich", "Vienna"], "Berlin"),
    ("Which planet is closest to the sun?", ["Venus", "Mars", "Mercury"], "Mercury"),
    ("Which animal is the largest?", ["blue whale", "elephant", "giraffe"], "blue whale"),
    ("How many continents are there?", ["five", "seven", "nine"], "seven"),
    ("Which colour do you get by mixing blue and yellow?", ["green", "purple", "orange"], "green"),
]
for n, (text, options, answer) in enumerate(capitals):
    add(f"quiz{n + 1:02d}", text, choice("Which option answers the question in the input?", options), answer)

# --- Emails: spam, intent, formality ------------------------------------------------------------
INTENT = ["question", "complaint", "thanks", "meeting request"]
FORMAL = ["informal", "neutral", "formal"]
emails = [
    ("CONGRATULATIONS!!! You have WON a free cruise. Click this link and enter your bank details to claim it.", True, None, 0),
    ("Hi Sam, can we meet on Thursday at 3pm to go over the project plan?", False, "meeting request", 1),
    ("Dear Ms. Ortega, I am writing to express my sincere gratitude for your assistance with my application. Yours faithfully, J. Park", False, "thanks", 2),
    ("hey, does the shop open on sundays?", False, "question", 0),
    ("I have waited three weeks for a reply about my broken washing machine. This is unacceptable.", False, "complaint", 1),
    ("Earn $5000 a day from home!!! No experience needed, limited offer, act now!!!", True, None, 0),
    ("Dear Professor Lee, could you please let me know the deadline for the final essay? Kind regards, Maria", False, "question", 2),
    ("thx so much for the help yesterday!! u saved my day", False, "thanks", 0),
    ("Would you be available for a call next Tuesday morning to discuss the contract?", False, "meeting request", 1),
    ("Your account has been suspended. Verify your password within 24 hours at the link below or lose access forever.", True, None, 1),
]
for n, (text, spam, intent, formality) in enumerate(emails):
    g = f"email{n + 1:02d}"
    add(g, text, noul("The message is spam or a scam."), spam)
    if intent:
        add(g, text, choice("What does the sender mainly want?", INTENT), intent)
    add(g, text, score("How formal is the message?", FORMAL), formality)

# --- Time and sizes (ordinal scores) -----------------------------------------------------------
SIZE = ["small", "medium", "large"]
sizes = [("an ant", 0), ("a mouse", 0), ("a dog", 1), ("a bicycle", 1), ("an elephant", 2), ("a bus", 2), ("a coin", 0), ("a house", 2)]
for n, (thing, level) in enumerate(sizes):
    add(f"size{n + 1:02d}", f"The object is {thing}.", score("How big is the object compared with a person?", SIZE), level)
TEMP = ["cold", "mild", "hot"]
temps = [("It is -10 degrees Celsius and snowing.", 0), ("It is 20 degrees Celsius with a light breeze.", 1), ("It is 40 degrees Celsius in the desert sun.", 2),
         ("The lake is frozen solid and everyone wears thick coats.", 0), ("People are sunbathing and eating ice cream because it is so hot.", 2)]
for n, (text, level) in enumerate(temps):
    add(f"temp{n + 1:02d}", text, score("How warm is it?", TEMP), level)

SPEED = ["slow", "moderate", "fast"]
speeds = [("a snail crawling", 0), ("a jet plane flying", 2), ("a person riding a bicycle", 1), ("a turtle walking", 0), ("a racing car on a track", 2), ("a person jogging", 1)]
for n, (thing, level) in enumerate(speeds):
    add(f"speed{n + 1:02d}", f"The input describes {thing}.", score("How fast is what the input describes?", SPEED), level)

# --- Animals and categories ----------------------------------------------------------------------
KIND = ["mammal", "bird", "fish", "insect"]
animals = [("a cat", "mammal"), ("an eagle", "bird"), ("a salmon", "fish"), ("a butterfly", "insect"), ("a horse", "mammal"),
           ("a sparrow", "bird"), ("a shark", "fish"), ("an ant", "insect"), ("a cow", "mammal"), ("a parrot", "bird")]
for n, (animal, kind) in enumerate(animals):
    add(f"animal{n + 1:02d}", f"The animal is {animal}.", choice("What kind of animal is it?", KIND), kind)
FRUIT = ["fruit", "vegetable", "grain"]
foods = [("apple", "fruit"), ("carrot", "vegetable"), ("rice", "grain"), ("banana", "fruit"), ("broccoli", "vegetable"), ("wheat", "grain"), ("strawberry", "fruit"), ("spinach", "vegetable")]
for n, (food, kind) in enumerate(foods):
    add(f"food{n + 1:02d}", f"The item is {food}.", choice("Which category does the item belong to?", FRUIT), kind)

# --- Reading comprehension ----------------------------------------------------------------------
stories = [
    ("Anna left home at 8 o'clock, took the bus to the library and returned the two books she had borrowed.",
     [("Anna went to the library.", True), ("Anna travelled by car.", False), ("Anna returned two books.", True)]),
    ("The shop was closed on Sunday, so Tom bought bread at the petrol station instead.",
     [("Tom bought bread at the shop.", False), ("The shop was closed on Sunday.", True)]),
    ("After the meeting was cancelled, Lena spent the afternoon writing the quarterly report.",
     [("The meeting took place.", False), ("Lena wrote a report.", True)]),
    ("The red car is faster than the blue car, and the blue car is faster than the green car.",
     [("The red car is faster than the green car.", True), ("The green car is the fastest.", False)]),
]
for n, (text, claims) in enumerate(stories):
    g = f"story{n + 1:02d}"
    for claim, truth in claims:
        add(g, text, noul(f"According to the input: {claim}"), truth)

OUT.parent.mkdir(parents=True, exist_ok=True)
with OUT.open("w") as f:
    for line in lines:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
kinds = {}
for line in lines:
    kinds[line["question"]["type"]] = kinds.get(line["question"]["type"], 0) + 1
print(f"{OUT}: {len(lines)} questions, {len({l['group'] for l in lines})} groups, {kinds}")
