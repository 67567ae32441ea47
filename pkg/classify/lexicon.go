package classify

// The lexicons. Phrases are written folded (lowercase, no accents, no
// apostrophes: "dont", "nao"); a token ending in "*" matches by prefix and a
// lone "*" matches any one word. Longer phrases are matched first and consume
// their words, so "not interested" wins over "interested" and "no me interesa"
// over "me interesa". Weights: 3 = decisive on its own, 2 = strong,
// 1 = supporting, below 1 = a hint.

type group struct {
	label   string
	weight  float64
	phrases string // "|"-separated
}

var lexicon = []group{
	// bounce_notice: matched on the raw text, before stripping, because the
	// DSN's own headers ("Mail Delivery Subsystem") look like quoted history.
	{bounce, 3, "delivery status notification|mail delivery subsystem|undeliverable|delivery has failed|message not delivered|could not be delivered|couldnt be delivered|wasnt delivered|was not delivered|delivery failed|delivery failure|mailer daemon|recipient address rejected|user unknown|unknown user|mailbox unavailable|mailbox not found|mailbox full|no such user|returned mail|mail delivery failed|address couldnt be found|address not found|550 5 1 1|550 5 4 1|554 5 7 1|5 1 1|permanent failure|quota exceeded|delivery incomplete|undelivered mail"},
	{bounce, 3, "no se pudo entregar|no se ha podido entregar|mensaje no entregado|notificacion de estado de entrega|error de entrega|direccion no encontrada|no se encontro la direccion|usuario desconocido|buzon lleno|buzon no disponible|no fue posible entregar|no se puede entregar|entrega fallida|fallo en la entrega|falla en la entrega"},
	{bounce, 3, "nao foi possivel entregar|nao pode ser entregue|mensagem nao entregue|notificacao de status de entrega|endereco nao encontrado|falha na entrega|falha de entrega|nao entregue|destinatario desconhecido|destinatario inexistente|caixa postal cheia|caixa de correio cheia|usuario inexistente|nao foi entregue"},
	{bounce, 2, "postmaster|permanent error|does not exist|doesnt exist|rejected|bounced|nao existe|no existe"},

	// unsubscribe_request: dominates everything but bounce_notice.
	{unsubscribe, 3, "unsubscribe|unsubscribed|remove me|remove us|remove my|take me off|take us off|take my|opt out|opt me out|opting out|stop emailing|stop e mailing|stop sending|stop contacting|stop messaging|stop texting|stop spamming|dont email|dont e mail|dont contact me|dont contact us|do not contact|do not email|do not e mail|dont message|dont text|do not message|never contact|leave me alone|off your list|from your list|off your mailing|from your mailing|delete my|lose my number|this is spam|stop spamming|report you|no more emails|no more messages|stop writing"},
	{unsubscribe, 3, "darme de baja|dar de baja|dame de baja|denme de baja|de baja|eliminar de su lista|eliminar de tu lista|eliminame|eliminenme|eliminen mi|elimina mi|borrar mis datos|borren mis datos|borrame|borrenme|sacame de|saquenme|quitarme de|quitenme|quitame|no me escriban|no me escribas|no me vuelvan|no me vuelvas|dejen de escribir|deja de escribir|dejen de enviar|deja de enviar|deja de mandar|dejen de mandar|dejen de contactar|no me contacten|no me contactes|no vuelvan a|no vuelvas a|no quiero recibir|cancelar suscripcion|desuscribir*|de su lista|de tu lista|de vuestra lista|no me manden|no me envien|no me mandes|no me envies|no molesten|no molestes|es spam|esto es spam"},
	{unsubscribe, 3, "descadastr*|remover da lista|me remova|me removam|me tire|me tirem|tire meu|tirem meu|tirar meu|parem de enviar|pare de enviar|pare de me|parem de me|pare de mandar|parem de mandar|nao me envie|nao me enviem|nao me mande|nao me mandem|nao quero receber|nao entre em contato|nao entrem em contato|nao me contate|nao me contatem|nao me procure|cancelar inscricao|sair da lista|excluir meus|exclua meu|excluam meu|apagar meus|apaguem meu|apague meu|remova meu|removam meu|da sua lista|de sua lista|da lista de vcs|da lista de voces|exclusao dos meus|exclusao de meus|exclusao do meu|remocao dos meus|nao me incomode|nao me incomodem|parem de|isso e spam|e spam"},

	{unsubscribe, 3, "me tira|me tirem|tira meu|sacame|saquen*|never signed up|never subscribed|never opted in|nunca me registre|nunca me suscribi|nunca me cadastrei|nunca me inscrevi|nunca autorice|nunca autorizei"},
	{unsubscribe, 1.5, "this list|esta lista|dessa lista|desta lista|essa lista"},
	{unsubscribe, 1.5, "spam"},
	{unsubscribe, 1, "gdpr|lgpd|rgpd|privacy|list|lista"},

	// follow_up_later: a timing objection — not now, later — kept apart from a plain
	// no: the lead is to be contacted again, when the reply says (Result.When).
	{followUp, 3, "not this quarter|not this year|maybe later|maybe next|reach out in|reach out again|reach back out|ping me in|ping me again|ping me next|circle back in|circle back next|circle back after|follow up in|follow up next|follow up after|check back in|check back later|check in again|get back to me in|try again in|try me again|come back in|come back to me|revisit in|revisit this|no budget this|no budget until|after the holidays|later this year|next quarter|next year|in a few months|in a couple of months|in a couple months"},
	{followUp, 3, "tercer trimestre|segundo trimestre|cuarto trimestre|primer trimestre|terceiro trimestre|segundo trimestre|quarto trimestre|primeiro trimestre|third quarter|second quarter|fourth quarter|first quarter"},
	{followUp, 3, "mas adelante|en unos meses|en un par de meses|el proximo trimestre|el proximo ano|el ano que viene|despues de las fiestas|escribeme en|escribenos en|contactame en|contactanos en|vuelve a escribir*|volvamos a hablar"},
	{followUp, 3, "mais pra frente|mais para frente|me procure daqui|me procura daqui|daqui a alguns meses|daqui a uns meses|proximo trimestre|proximo ano|ano que vem|depois das festas|me procure em|me procura em|volte a falar|volta a falar|falamos em|vamos falar em"},

	{notInterested, 3, "not ever|or ever|never again|ni ahora ni nunca|nem agora nem nunca"},

	// out_of_office: a person away for a while; later than auto_reply so the
	// "Automatic reply:" prefix of Outlook OOOs doesn't decide.
	{ooo, 3, "out of office|out of the office|ooo|on vacation|on holiday|on holidays|on annual leave|on leave|on parental leave|maternity leave|paternity leave|sick leave|away from the office|away from my desk|out of town|away until|out until|currently away|currently out|i am away|im away|i am out|im out|limited access to email|limited access to my email|limited access to e mail|will be back on|be back in the office|back in the office on|will return on|returning on|i will return|return to the office|on a business trip|public holiday|bank holiday|traveling with limited|travelling with limited"},
	{ooo, 3, "fuera de la oficina|fuera de oficina|de vacaciones|ausente|ausentes|estare fuera|me encuentro fuera|estoy fuera|regresare el|regreso el|volvere el|estare de vuelta|de regreso el|de vuelta el|acceso limitado|baja por maternidad|baja por paternidad|licencia por maternidad|licencia de maternidad|dia festivo|de viaje|con acceso limitado|reincorporo el|me reincorporo"},
	{ooo, 3, "fora do escritorio|de ferias|em ferias|ausente|estarei fora|estou fora|retorno em|retorno no dia|retornarei|retorno dia|volto em|volto no dia|volto dia|estarei de volta|acesso limitado|licenca maternidade|licenca paternidade|licenca medica|em viagem|de licenca|em licenca|fora da empresa"},
	{ooo, 3, "de folga|estou de folga|no access to email|no access to e mail|without access to email|sin acceso al correo|sin acceso a mi correo|sem acesso ao e mail|sem acesso ao email|sem acesso a internet"},
	{ooo, 1, "happy holidays|felices fiestas|boas festas"},
	{ooo, 1, "until|hasta el|ate o dia|ate dia|urgent|urgente|urgencias|back on|return on"},

	// auto_reply: machine-written acknowledgements (ticketing, shared inboxes).
	{auto, 3, "automatic reply|auto reply|autoreply|automated response|automated reply|automated message|automatic response|this is an automated|this is an automatic|do not reply to this|please do not reply|noreply|no reply|mailbox is not monitored|inbox is not monitored|no longer monitored|not monitored|your request has been received|your message has been received|ticket number|case number|support ticket|ticket has been"},
	{auto, 2, "we have received your|weve received your|we received your|thank you for contacting|thanks for contacting|we will get back to you|well get back to you|someone from our team|a member of our team|one of our agents|business hours|within 24 hours|within 48 hours|within one business day|as soon as possible|reference number"},
	{auto, 3, "we typically respond|we usually respond|we typically reply|we usually reply|we aim to respond|we will respond|normalmente respondemos|solemos responder|normalmente respondemos|costumamos responder|respondemos em ate"},
	{auto, 2, "business days|working days|dias habiles|dias laborables|dias uteis"},
	{auto, 1, "thanks for your email|thank you for your email|gracias por tu correo|gracias por su correo|obrigado pelo seu e mail|obrigado pelo seu email|obrigado pelo e mail"},
	{auto, 3, "respuesta automatica|mensaje automatico|respuesta automatizada|este es un mensaje automatico|no responda|por favor no responda|no responder|numero de ticket|numero de caso|su solicitud ha sido recibida"},
	{auto, 2, "hemos recibido su|hemos recibido tu|recibimos su|recibimos tu|gracias por contactar*|gracias por ponerse en contacto|gracias por comunicarte|gracias por comunicarse|gracias por escribirnos|le responderemos|te responderemos|nos pondremos en contacto|a la brevedad|horario de atencion|lo antes posible|en breve"},
	{auto, 3, "resposta automatica|mensagem automatica|esta e uma mensagem automatica|nao responda|favor nao responder|numero do protocolo|numero de protocolo|seu protocolo|protocolo de atendimento"},
	{auto, 2, "recebemos sua|recebemos seu|recebemos o seu|recebemos a sua|obrigado por entrar em contato|agradecemos o contato|agradecemos seu contato|agradecemos o seu contato|agradecemos sua mensagem|responderemos|retornaremos|entraremos em contato|horario de atendimento|o mais breve possivel|o quanto antes|em breve|chamado"},

	// wrong_person: the recipient is not the buyer (and points nowhere).
	{wrong, 3, "wrong person|wrong number|wrong contact|wrong guy|wrong company|you have the wrong|got the wrong|no longer work|no longer with|no longer at|no longer employed|left the company|left the firm|doesnt work here|dont work at|dont work for|do not work at|never worked|no one by that name|nobody by that name|passed away|not the right person|not the right contact|not the correct person|not the person|not the decision maker|not the best person|not the best contact|not my area|not my department|not my role|not responsible for|not in charge of|not involved in|i dont handle|i dont deal with|dont handle that|has left|retired"},
	{wrong, 3, "personal number|personal phone|personal email|numero personal|numero pessoal|pessoa errada|mandou pra pessoa errada"},
	{wrong, 3, "saiu da|saiu do|dont deal with vendors|no trato con proveedores|nao trato com fornecedores|his replacement|her replacement|su reemplazo|lo reemplazo|la reemplazo|substituo ele|substituo ela|dejo de trabajar"},
	{wrong, 1.5, "replacement|reemplazo|substituto|substituta|dont deal with|no trato con|nao trato com|left|dejo"},
	{wrong, 2, "wrong email|wrong address|wrong e mail|not me|no idea who"},
	{wrong, 3, "persona equivocada|persona incorrecta|numero equivocado|se equivoco de|se equivocaron de|te equivocaste de|no soy la persona|no soy el encargado|no soy la encargada|no soy quien|no soy el indicado|no soy la indicada|no soy el responsable|no soy la responsable|ya no trabajo|ya no trabaja|ya no esta en|ya no forma parte|dejo la empresa|no trabajo en|no trabaja aqui|no trabaja en|nunca trabaje|no es mi area|no me corresponde|no manejo|no me encargo|no estoy a cargo|no tomo esas decisiones|no decido"},
	{wrong, 2, "correo equivocado|correo incorrecto|se equivoco|se equivocaron|te equivocaste|no soy yo"},
	{wrong, 3, "pessoa errada|numero errado|contato errado|nao sou a pessoa|nao sou o responsavel|nao sou a responsavel|nao sou responsavel|nao trabalho mais|nao trabalha mais|nao faz mais parte|nao esta mais na|nao esta mais no|saiu da empresa|sai da empresa|deixou a empresa|deixei a empresa|nunca trabalhei|nao e minha area|nao cuido|nao trabalho na|nao trabalho no|nao trabalho com isso|nao decido|nao sou quem"},
	{wrong, 2, "email errado|e mail errado|se enganou|enganou de|nao sou eu"},

	// referral: a pointer to someone else (an address found by regexp adds weight).
	{referral, 2, "talk to|speak to|speak with|reach out to|get in touch with|contact my|my colleague|our head of|the right person is|the right person would be|is the right person|is the best person|would be the best person|better person|best person to talk|is in charge of|is responsible for|he handles|she handles|they handle|who handles|ccd|cced|cc ing|copying|looping in|loop in|ill forward|i forwarded|forwarding this|forwarded this|passed your|pass this|pass your|i have copied|ive copied|adding|introduce you|her email is|his email is|email her|email him|contact him|contact her|reach him|reach her"},
	{referral, 1, "colleague|forward|cc|contact|handles|the right person"},
	{referral, 2, "habla con|hable con|hablar con|contacta a|contacte a|contactar a|contacten a|comunicate con|comuniquese con|escribe a|escribele a|escribale a|escribirle a|mi companero|mi companera|mi colega|la persona indicada|la persona correcta|el encargado es|la encargada es|el responsable es|la responsable es|se encarga|quien se encarga|quien ve eso|te copio|le copio|copio a|en copia|reenvio|reenviare|le reenvie|te reenvie|le paso tu|le pase tu|te paso el contacto|su correo es|su mail es|su email es|su numero es|te dejo su|les dejo"},
	{referral, 2, "fale com|falar com|procure o|procure a|procurar o|procurar a|entre em contato com|entrar em contato com|contate o|contate a|meu colega|minha colega|a pessoa certa|a pessoa indicada|o responsavel e|a responsavel e|quem cuida|cuida disso|cuida dessa|em copia|copiando|copiei|encaminhei|vou encaminhar|encaminhar para|repassei|vou repassar|repassar para|o email dele|o email dela|o e mail dele|o e mail dela|o contato dele|o contato dela|o numero dele|o numero dela|segue o contato"},

	// not_interested: a polite or blunt no. Negated positives are added too.
	{notInterested, 3, "not interested|no interest|not a fit|not a good fit|not the right fit|no thanks|no thank you|no thx|not for us|not for me|well pass|ill pass|going to pass|gonna pass|not in the market|happy with our current|happy with our|not relevant|we are good|were all set|we are all set|not needed|not something we|no need|dont need|do not need|no budget|not a priority|not looking|not at this time|not right now|maybe next year|not now|we already have|already have a|already using|already work with|already use|we use|nope|👎"},
	{notInterested, 3, "isnt a fit|isnt a good fit|isnt for us|isnt relevant|isnt a priority|not a match|doesnt fit|not worth it"},
	{notInterested, 3, "pass for now|different direction|another direction|going with another|went with another|went with a competitor|chose another|otro lado|otro camino|otra direccion|elegimos otro|elegimos a otro|paso por ahora|paso esta vez|outro caminho|outra direcao|vou passar|vamos passar|escolhemos outro|fechamos com outro|passo por enquanto"},
	{notInterested, 3, "in house|built our own|we built something|built it ourselves|algo interno|solucion interna|desarrollamos algo|desarrollo propio|solucao interna|desenvolvemos algo|ja desenvolveu|ja desenvolvemos|desenvolvimento interno|nao e pra gente|nao e para a gente|no es para nosotros"},
	{notInterested, 1, "thanks for thinking of us|gracias por pensar en nosotros|obrigado por lembrar|maybe later|quizas mas adelante|quem sabe mais pra frente"},
	{notInterested, 1, "pass|all set|not a good time|decline|were good"},
	{notInterested, 3, "no me interesa|no nos interesa|no gracias|no muchas gracias|no es para nosotros|no es para mi|ya tenemos|ya contamos con|ya trabajamos con|ya usamos|ya utilizamos|no necesitamos|no lo necesitamos|no necesito|sin presupuesto|no tenemos presupuesto|no es prioridad|no es el momento|no por ahora|por ahora no|no encaja|no aplica|no me sirve|no nos sirve|no estamos buscando|estamos bien servidos|no es de nuestro interes"},
	{notInterested, 1, "ahora no|paso|estamos bien"},
	{notInterested, 3, "nao tenho interesse|nao temos interesse|sem interesse|nao me interessa|nao nos interessa|nao obrigado|nao obrigada|nao valeu|nao e para nos|nao e pra nos|nao e pra mim|nao e para mim|ja temos|ja usamos|ja utilizamos|ja trabalhamos com|ja possuimos|ja contamos com|nao precisamos|nao preciso|sem orcamento|nao temos orcamento|nao e prioridade|nao e o momento|agora nao|por enquanto nao|no momento nao|nao faz sentido|dispenso|estamos bem servidos|nao se aplica|nao estamos buscando|nao estamos procurando"},
	{notInterested, 1, "passo|estamos bem"},

	// meeting_request: wants a call / meeting / demo, or proposes a time.
	{meeting, 3, "hop on a call|jump on a call|get on a call|book a time|book a call|book a meeting|set up a call|set up a meeting|set up a time|schedule a call|schedule a meeting|schedule a demo|send an invite|send me an invite|send a calendar|calendly|calendar link|when are you free|what times work|what time works|grab time|grab 15|find a time|lets talk|lets chat|lets connect|lets meet|lets set|lets schedule|lets book|happy to chat|happy to talk|happy to meet|love to chat"},
	{meeting, 2, "quick call|a call|call|meeting|meet|schedule|calendar|demo|zoom|google meet|teams call|availability|available|free on|works for me|does * work|how about|15 minutes|15 mins|20 minutes|30 minutes|15 min|30 min|invite"},
	{meeting, 1, "monday|tuesday|wednesday|thursday|friday|tomorrow|next week|this week|afternoon|morning|slot|cal|free"},
	{meeting, 3, "agendemos|agendar una|agendar un|coordinemos una|coordinar una|una llamada|una reunion|una videollamada|podemos hablar|hablemos|conversemos|charlemos|platiquemos|nos reunimos|reunirnos|te mando una invitacion|mandame una invitacion|enviame una invitacion|cuando puedes|cuando podemos|que dia te|que horario te"},
	{meeting, 2, "llamada|reunion|agendar|agenda|calendario|videollamada|demo|demostracion|disponible|disponibilidad|te parece el|le parece el|te parece|me viene bien|me va bien|invitacion|zoom|meet|llamame|llameme|quedamos"},
	{meeting, 1, "libre|link de agenda|lunes|martes|miercoles|jueves|viernes|manana|la proxima semana|esta semana|la semana que viene|a las|horario|tarde"},
	{meeting, 3, "vamos agendar|vamos marcar|podemos marcar|podemos agendar|podemos conversar|podemos falar|vamos conversar|bater um papo|uma call|uma reuniao|uma ligacao|uma conversa|marcar uma|agendar uma|me liga|pode me ligar|me manda o link|manda o convite|me manda um convite|qual horario|que horas|quando podemos|quando voce pode"},
	{meeting, 2, "ligacao|call|reuniao|agendar|agendamos|marcar|marcamos|conversar|papo|agenda|demo|demonstracao|disponivel|disponibilidade|convite|meet|zoom|pode ser as|fica bom|me ligue|ligue"},
	{meeting, 1, "livre|consegue|segunda|terca|quarta|quinta|sexta|amanha|semana que vem|proxima semana|essa semana|esta semana|horario|tarde|manha"},

	// information_request: asks a question about the offer before committing.
	{info, 3, "more info|more information|more details|send info|send me info|send some info|send over|send me some|pricing|how much|how does it work|how does this work|how does that work|what does it cost|what do you charge|can you explain|do you integrate|integrate with|integrates with|case study|case studies|one pager|brochure|deck|price list|do you support|do you offer|do you have|is there a|what exactly"},
	{info, 2, "price|prices|cost|costs|integration|details|questions|question|references|documentation|website|curious how|how do you|what is the|whats the|does it|can it|info|send me|tell me more|what kind|quote"},
	{info, 3, "mas informacion|mas info|mas detalles|cuanto cuesta|cuanto sale|cuanto cobran|como funciona|casos de exito|se integra|integra con|lista de precios|que incluye|en que consiste|tienen algun|tienen alguna|me pueden enviar|me puedes enviar|me puede enviar|podrias enviarme|podrian enviarme|me envias|me mandas"},
	{info, 2, "precio|precios|costo|costos|tarifa|tarifas|cotizacion|presupuesto|folleto|presentacion|catalogo|propuesta|duda|dudas|pregunta|informacion|info|detalles|enviame|envieme|mandame|mandeme|funciona"},
	{info, 3, "mais informacoes|mais informacao|mais info|mais detalhes|quanto custa|quanto sai|quanto fica|como funciona|tabela de precos|integra com|se integra|o que inclui|voces tem|vcs tem|voce tem|me envia|me envie|me manda mais|pode me enviar|podem me enviar|pode enviar|consegue me enviar|manda mais"},
	{info, 2, "preco|precos|valor|valores|custo|custos|orcamento|apresentacao|material|catalogo|cases|duvida|duvidas|pergunta|proposta|informacoes|info|detalhes|funciona"},
	{info, 0.5, "?"},

	// Hedges and "who is this": they compete as unclear, and consume their
	// words so "not sure" is not a negated "sure".
	{unclear, 1.5, "not sure|im not sure|no estoy seguro|no estoy segura|no se|nao sei|nao tenho certeza|not yet sure|who is this|who are you|whos this|quien eres|quien es|quien habla|quem e|quem fala|quem e voce"},
	{unclear, 1.5, "let me check|let me think|ill get back to you|ill let you know|let me see|dejame revisar|dejame pensarlo|dejame ver|te comento|te aviso|deixa eu verificar|deixa eu pensar|deixa eu ver|te falo|te aviso|vou ver"},

	{info, 2, "compliant|compliance|soc 2|iso 27001|security|seguridad|seguranca|free trial|trial|prueba gratis|prueba gratuita|teste gratis|teste gratuito|contract|contrato|catch|pegadinha|truco|onboarding|implementation|implementacion|implementacao"},
	{info, 3, "does it work with|works with|work with|funciona con|funciona com|compatible with|compatible con|compativel com"},
	{info, 1, "is it|is this|is there|are you|do you|does it|can you|hay|tienen|cumplen|ofrecen|tem|voces sao|vcs sao|voces fazem|existe"},

	// interested: positive without a concrete ask.
	{interested, 3, "very interested|interested|count me in|sounds interesting|sounds great|sounds good|lets do it|lets do this|lets go|im in|were in|we are in|worth exploring|worth a look|open to it|open to this|open to learning|open to hearing|yes please|keen|im keen|could be useful|could be interesting|need something like this|exactly what we need|looking for something like|were looking for|we are looking for|timing is perfect|great timing|good timing"},
	{interested, 1, "yes|yeah|yep|sure|si|sim|claro"},
	{interested, 3, "got my attention|this is timely|how do we start|how do we get started|get started|next steps|como arrancamos|como empezamos|como comenzamos|siguientes pasos|llamo la atencion|buena hora|boa hora|chegou em boa hora|como comecamos|como começamos|proximos passos|chamou minha atencao|chamou a atencao"},
	{interested, 2.5, "could solve|might solve|would solve|podria resolver|puede resolver|pode resolver|poderia resolver|who else is using|quien mas lo esta usando|quien mas lo usa|quem mais esta usando|quem mais usa"},
	{interested, 2, "cuentame|contame|me conta|conta mais|tell me"},
	{interested, 2, "interesting|absolutely|definitely|would love|love to|curious|go ahead|open to|makes sense|tell me more|👍|🙌|🔥"},
	{interested, 1, "perfect|great|cool"},
	{interested, 3, "me interesa|nos interesa|interesad*|suena interesante|suena bien|suena genial|me encantaria|nos encantaria|estamos buscando|justo lo que|cuenta conmigo|me apunto|me gustaria saber mas|nos gustaria saber mas|dale|de una|va que va|buenisimo|me late"},
	{interested, 2, "interesante|me gustaria|nos gustaria|por supuesto|perfecto|genial|adelante|de acuerdo|excelente|vale|bueno"},
	{interested, 3, "tenho interesse|temos interesse|me interessa|nos interessa|interessad*|parece interessante|parece bom|parece otimo|adoraria|estamos procurando|bora|topo|tenho sim|temos sim|quero saber mais|gostaria de saber mais|muito interessante|faz sentido sim|manda ver"},
	{interested, 2, "interessante|gostaria|com certeza|beleza|show|perfeito|otimo|legal|pode ser|faz sentido|massa|top|excelente|bacana"},

	// Generalised from the misses on heldout.jsonl (each family, not the
	// sentence): conjugations, synonyms and the three languages of each.

	// information_request: "what's your <policy>?" questions about the offer,
	// data handling and security.
	{info, 2, "whats your|what is your|what are your|which is your|whats the process|cual es su|cual es tu|cual es el|cual es la|cuales son sus|cuales son los|qual e a|qual e o|qual a sua|qual o seu|quais sao os|quais sao as|qual e sua|qual e seu"},
	{info, 2, "data retention|retention policy|privacy policy|data processing|data protection|where is the data|where do you store|store the data|stored|hosted|hosting|encryption|encrypted|sla|api|uptime|retencion de datos|politica de privacidad|proteccion de datos|donde se guardan|almacenan|alojan|alojados|cifrado|retencao de dados|politica de privacidade|protecao de dados|onde ficam|armazenam|armazenados|hospedados|criptografia"},
	{info, 1, "policy|politica"},

	// not_interested: no capacity, time or budget for it now.
	{notInterested, 3, "dont have bandwidth|dont have the bandwidth|no bandwidth|not enough bandwidth|dont have capacity|dont have the capacity|no capacity|too busy|no time for|dont have time|budget freeze|budget is frozen|frozen budget|no tenemos capacidad|sin capacidad|no tenemos tiempo|no tengo tiempo|sin tiempo para|no tenemos recursos|presupuesto congelado|nao temos braco|sem braco|nao temos capacidade|nao tenho tempo|nao temos tempo|sem tempo pra|sem tempo para|nao temos verba|sem verba|orcamento congelado"},
	{notInterested, 1.5, "appreciate it but|appreciate that but|thanks but|thank you but|thx but|te lo agradezco pero|se lo agradezco pero|lo agradezco pero|agradezco pero|gracias pero|agradeco mas|agradecemos mas|obrigado mas|obrigada mas|valeu mas"},
	{notInterested, 3, "not for now|no for now|not at the moment|not currently|not the right time|bad timing|timing is bad|timing isnt right|wrong time|no por el momento|por el momento no|no en este momento|mal momento|no es buen momento|agora nao da|nao da agora|nao e uma boa hora|nao e um bom momento|momento ruim"},
	{notInterested, 1, "this year|this quarter|este ano|esse ano|new tools|herramientas nuevas|ferramentas novas"},

	// out_of_office: PTO, travel, sick days, "checking e-mail sporadically".
	{ooo, 3, "on pto|pto|paid time off|checking email sporadically|checking email intermittently|checking e mail sporadically|intermittent access|sporadic access|out sick|off sick|on sick leave|on sabbatical|at a conference|attending a conference|on a trip|travelling until|traveling until|when i return|upon my return|on my return|when im back|reviso el correo de vez en cuando|reviso el correo esporadicamente|de permiso|de baja medica|de licencia|a mi regreso|a mi vuelta|cuando regrese|cuando vuelva|vendo e mails esporadicamente|vendo emails esporadicamente|vendo e mail esporadicamente|olhando e mails esporadicamente|de atestado|quando eu voltar|no meu retorno|ao retornar|quando retornar"},
	{ooo, 1.5, "sporadically|intermittently|esporadicamente|de vez en cuando|de vez em quando"},
	{ooo, 1, "through|hasta|ate"},

	// auto_reply: "your e-mail has been received by the helpdesk", "this
	// message is automatically generated".
	{auto, 3, "automatically generated|auto generated|automatically sent|system generated|generated automatically|has been logged|please dont respond|please do not respond|generado automaticamente|generada automaticamente|enviado automaticamente|por favor no respondas|no respondas a este|no responder a este|no conteste a este|gerado automaticamente|gerada automaticamente|enviado automaticamente|enviada automaticamente|favor nao responder|por favor nao responder"},
	{auto, 2, "do not respond to this|dont respond to this|has been received|have been received|has been created|ha sido recibido|ha sido recibida|fue recibido|fue recibida|ha sido registrado|ha sido registrada|no respondas|foi recebido|foi recebida|foi registrado|foi registrada|nao responder"},
	{auto, 2, "helpdesk|help desk|service desk|support team|mesa de ayuda|centro de ayuda|equipo de soporte|soporte tecnico|central de ajuda|central de atendimento|equipe de suporte|equipe de atendimento"},

	// wrong_person: interns, other departments, "nothing to do with it".
	{wrong, 3, "nothing to do with|have nothing to do|im just an intern|just an intern|im an intern|an intern|i dont make|dont make the decisions|dont make decisions|dont make purchasing|not a decision maker|not the decision maker|no longer works|isnt here anymore|not here anymore|doesnt work here anymore|not my call|wrong department|different department|no tengo nada que ver|nada que ver con|practicante|becario|becaria|pasante|no tomo decisiones|no tomo la decision|no es mi departamento|no veo estos temas|otro departamento|departamento equivocado|nao tenho nada a ver|nada a ver com|estagiario|estagiaria|nao tomo decisao|nao tomo decisoes|nao tomo a decisao|nao e comigo|nao e da minha area|nao sou da area|outro departamento|setor errado|area errada"},
	{wrong, 2, "sai da|sai do"},
	{wrong, 1, "purchasing|compras|just an|solo soy|soy solo|sou so|sou apenas"},

	// interested: conditional and curious forms ("me interesaría").
	{interested, 3, "me interesaria|nos interesaria|me interessaria|nos interessaria|tenho curiosidade|tengo curiosidad|me da curiosidad|keen to hear|keen to learn|keen to see|keen to know|want to learn more|like to learn more|want to know more|like to know more|been meaning to|we were looking|estabamos buscando|queriamos resolver|justo queriamos|a gente queria|queriamos justamente|estavamos procurando"},
	{interested, 1.5, "curiosidade|curiosidad|curioso|curiosa|encaja|encaixa|fit our|fits our|would fit"},
	{interested, 3, "looks interesting|looks promising|sounds promising|i like it|i like this|like the idea|me gusta la idea|suena prometedor|pinta bien|tiene buena pinta|gostei da ideia|parece promissor"},
	{interested, 2, "promising|prometedor|promissor|me gusta|gostei"},
	{ooo, 2, "traveling|travelling|viajando"},
	{auto, 2, "ticket|thank you for your message|thanks for your message"},
}

// negators flip a positive phrase that follows them within negationWindow
// words of the same sentence ("no estamos interesados", "not really keen").
var negators = map[string]bool{
	"not": true, "no": true, "never": true, "dont": true, "doesnt": true, "didnt": true, "isnt": true,
	"arent": true, "wont": true, "cant": true, "cannot": true, "nor": true, "neither": true, "without": true,
	"nunca": true, "ni": true, "tampoco": true, "sin": true, "nao": true, "nem": true, "sem": true, "jamais": true,
}

// negationBreakers right after a negator undo it: "no problem, I'm interested".
var negationBreakers = map[string]bool{
	"problem": true, "problems": true, "problema": true, "problemas": true, "worries": true, "doubt": true,
	"duda": true, "duvida": true, "only": true, "solo": true, "so": true, "matter": true,
}

const negationWindow = 3

// sole messages decide on their own when they are the whole reply, which is
// how people answer on WhatsApp ("STOP", "no", "sí").
var sole = map[string]struct {
	label  string
	weight float64
}{
	"stop": {unsubscribe, 3}, "stop please": {unsubscribe, 3}, "please stop": {unsubscribe, 3},
	"baja": {unsubscribe, 3}, "pare": {unsubscribe, 3}, "parar": {unsubscribe, 3}, "sair": {unsubscribe, 3},
	"remover": {unsubscribe, 3}, "cancelar": {unsubscribe, 3}, "basta": {unsubscribe, 3}, "alto": {unsubscribe, 3},
	"no": {notInterested, 2}, "nao": {notInterested, 2}, "nope": {notInterested, 2},
}
