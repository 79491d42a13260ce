#!/usr/bin/env python3
"""Writes calibration/many-options.jsonl: labelled choice questions with 30 to 255 options,
for measuring the wide-direct and two-stage readouts (`decide eval --questions ...`).

Easy facts (capital -> country, symbol -> element, state capital -> US state, number words
-> numerals) so that a small model can know the answer and what is measured is the readout,
not the model's knowledge. Options are shuffled with a fixed seed, so the expected answer sits
at varied positions and labels (single letters and letter pairs). Deterministic: rerunning
gives the same file.

Run: python3 scripts/many-options.py > calibration/many-options.jsonl
"""
import json
import random

rng = random.Random(5)

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"),
    ("Egypt", "Cairo"), ("Greece", "Athens"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Poland", "Warsaw"), ("Austria", "Vienna"),
    ("Hungary", "Budapest"), ("Ireland", "Dublin"), ("Canada", "Ottawa"), ("Mexico", "Mexico City"),
    ("Argentina", "Buenos Aires"), ("Peru", "Lima"), ("Chile", "Santiago"), ("Colombia", "Bogota"),
    ("Kenya", "Nairobi"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("South Korea", "Seoul"),
    ("India", "New Delhi"), ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
    ("Cuba", "Havana"), ("Belgium", "Brussels"), ("Netherlands", "Amsterdam"), ("Czech Republic", "Prague"),
    ("Romania", "Bucharest"), ("Ukraine", "Kyiv"), ("Australia", "Canberra"), ("New Zealand", "Wellington"),
    ("Brazil", "Brasilia"), ("Venezuela", "Caracas"), ("Indonesia", "Jakarta"), ("Philippines", "Manila"),
    ("Malaysia", "Kuala Lumpur"), ("Saudi Arabia", "Riyadh"), ("Morocco", "Rabat"), ("Nigeria", "Abuja"),
    ("Ethiopia", "Addis Ababa"), ("Iceland", "Reykjavik"), ("Switzerland", "Bern"), ("Croatia", "Zagreb"),
    ("Serbia", "Belgrade"), ("Bulgaria", "Sofia"), ("Pakistan", "Islamabad"), ("Afghanistan", "Kabul"),
    ("Syria", "Damascus"), ("Lebanon", "Beirut"), ("Jordan", "Amman"), ("Nepal", "Kathmandu"),
]

ELEMENTS = [
    ("H", "Hydrogen"), ("He", "Helium"), ("Li", "Lithium"), ("Be", "Beryllium"), ("B", "Boron"),
    ("C", "Carbon"), ("N", "Nitrogen"), ("O", "Oxygen"), ("F", "Fluorine"), ("Ne", "Neon"),
    ("Na", "Sodium"), ("Mg", "Magnesium"), ("Al", "Aluminium"), ("Si", "Silicon"), ("P", "Phosphorus"),
    ("S", "Sulfur"), ("Cl", "Chlorine"), ("Ar", "Argon"), ("K", "Potassium"), ("Ca", "Calcium"),
    ("Ti", "Titanium"), ("Cr", "Chromium"), ("Mn", "Manganese"), ("Fe", "Iron"), ("Co", "Cobalt"),
    ("Ni", "Nickel"), ("Cu", "Copper"), ("Zn", "Zinc"), ("As", "Arsenic"), ("Br", "Bromine"),
    ("Kr", "Krypton"), ("Ag", "Silver"), ("Sn", "Tin"), ("I", "Iodine"), ("Xe", "Xenon"),
    ("W", "Tungsten"), ("Pt", "Platinum"), ("Au", "Gold"), ("Hg", "Mercury"), ("Pb", "Lead"),
    ("U", "Uranium"), ("Ra", "Radium"),
]

STATES = [
    ("California", "Sacramento"), ("Texas", "Austin"), ("New York", "Albany"), ("Florida", "Tallahassee"),
    ("Illinois", "Springfield"), ("Ohio", "Columbus"), ("Georgia", "Atlanta"), ("Arizona", "Phoenix"),
    ("Massachusetts", "Boston"), ("Colorado", "Denver"), ("Utah", "Salt Lake City"), ("Hawaii", "Honolulu"),
    ("Tennessee", "Nashville"), ("Minnesota", "Saint Paul"), ("Washington", "Olympia"), ("Oregon", "Salem"),
    ("Nevada", "Carson City"), ("Alaska", "Juneau"), ("Virginia", "Richmond"), ("Louisiana", "Baton Rouge"),
    ("Michigan", "Lansing"), ("Wisconsin", "Madison"), ("Indiana", "Indianapolis"), ("Oklahoma", "Oklahoma City"),
    ("Arkansas", "Little Rock"), ("Mississippi", "Jackson"), ("Alabama", "Montgomery"), ("Kentucky", "Frankfort"),
    ("Missouri", "Jefferson City"), ("Iowa", "Des Moines"), ("Kansas", "Topeka"), ("Nebraska", "Lincoln"),
    ("Idaho", "Boise"), ("Montana", "Helena"), ("Wyoming", "Cheyenne"), ("New Mexico", "Santa Fe"),
    ("North Carolina", "Raleigh"), ("South Carolina", "Columbia"), ("Pennsylvania", "Harrisburg"),
    ("New Jersey", "Trenton"), ("Maryland", "Annapolis"), ("Delaware", "Dover"), ("Connecticut", "Hartford"),
    ("Rhode Island", "Providence"), ("Vermont", "Montpelier"), ("Maine", "Augusta"),
    ("New Hampshire", "Concord"), ("West Virginia", "Charleston"), ("North Dakota", "Bismarck"),
    ("South Dakota", "Pierre"),
]

ONES = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def words(n):
    """English words for 1 <= n <= 999."""
    parts = []
    if n >= 100:
        parts.append(ONES[n // 100] + " hundred")
        n %= 100
        if n:
            parts.append("and")
    if n >= 20:
        parts.append(TENS[n // 10] + ("-" + ONES[n % 10] if n % 10 else ""))
    elif n:
        parts.append(ONES[n])
    return " ".join(parts)


def line(qid, state, instructions, options, expected):
    options = list(options)
    rng.shuffle(options)
    assert expected in options and len(set(options)) == len(options)
    question = {"type": "choice", "instructions": instructions,
                "criteria": {o: None for o in options}}
    return json.dumps({"id": qid, "group": qid, "state": state, "question": question,
                       "expected": expected})


def pick(pairs, k):
    return rng.sample(pairs, k)


out = []
countries = [c for c, _ in CAPITALS]
for i, (country, capital) in enumerate(pick(CAPITALS, 12)):
    k = [30, 45, 60][i % 3]
    others = [c for c in countries if c != country]
    options = [country] + rng.sample(others, k - 1)
    out.append(line(f"capital{i:02d}", f"The traveller landed in {capital}, the capital city.",
                    "Which country is the traveller in?", options, country))
names = [n for _, n in ELEMENTS]
for i, (symbol, name) in enumerate(pick(ELEMENTS, 10)):
    k = [30, 42][i % 2]
    options = [name] + rng.sample([n for n in names if n != name], k - 1)
    out.append(line(f"element{i:02d}", f"The label on the jar shows the chemical symbol {symbol}.",
                    "Which element is in the jar?", options, name))
states = [s for s, _ in STATES]
for i, (st, capital) in enumerate(pick(STATES, 10)):
    k = [35, 50][i % 2]
    options = [st] + rng.sample([s for s in states if s != st], k - 1)
    out.append(line(f"state{i:02d}", f"The governor works in {capital}, the state capital.",
                    "Which US state is this?", options, st))
for i, (n, k) in enumerate([(7, 60), (42, 100), (73, 100), (19, 150), (128, 150), (200, 255),
                            (99, 255), (251, 255)]):
    options = [str(x) for x in range(1, k + 1)]
    out.append(line(f"number{i:02d}", f"She counted {words(n)} birds on the wire.",
                    "How many birds did she count?", options, str(n)))
print("# Many-option choice questions (30-255 options), written by scripts/many-options.py.")
print("# Measures wide-direct vs two-stage: decide eval --questions calibration/many-options.jsonl")
print("\n".join(out))
